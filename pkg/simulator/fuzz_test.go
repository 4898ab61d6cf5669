package simulator

import (
	"os"
	"testing"
)

// FuzzParseSchedulerConfig: the simulator reads an operator's
// KubeSchedulerConfiguration (--scheduler-config); any bytes are parsed
// or refused, never a panic, and what is accepted has weights kube-scheduler
// could run (not negative) and a percentage of nodes to score in 0..100.
func FuzzParseSchedulerConfig(f *testing.F) {
	for _, file := range []string{"../../config/kube-scheduler-config.yaml", "../../config/kube-scheduler-config-https.yaml"} {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 101\n"))
	f.Add([]byte("kind: Pod\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSchedulerConfig(data)
		if err != nil {
			return
		}
		if s.FitWeight < 0 || s.BalancedWeight < 0 || s.GPUPrioritizeWeight < 0 || s.CPUPrioritizeWeight < 0 {
			t.Fatalf("negative weight accepted: %+v", s)
		}
		if s.PercentageOfNodesToScore < 0 || s.PercentageOfNodesToScore > 100 {
			t.Fatalf("percentageOfNodesToScore %d accepted", s.PercentageOfNodesToScore)
		}
	})
}
