package chart

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/simulator"
)

// TestSimulatorReplaysEachTopology: what `simulate --topology T` replays is
// what the chart's topology T deploys. In both, the kube-scheduler
// configuration the chart renders for the pods that ask GPU memory is the
// simulator's (ShippedScheduler: sampling, scores, no prioritize), and no
// extender entry reaches the pods that ask none: in the extender topology
// the cluster's scheduler loads the chart's stanza (as
// config/kube-scheduler-config.yaml, which has no every-pod entry), in the
// second-scheduler one the cluster's own scheduler, which the chart does
// not configure, places them (DefaultKubeScheduler). The opt-in
// extender.scoreCPUPods adds the every-pod entry, and the simulator reads
// that too.
func TestSimulatorReplaysEachTopology(t *testing.T) {
	c := load(t)
	for _, tc := range []struct {
		topology           simulator.Topology
		values             map[string]any
		configMap, profile string
		want               func() *simulator.Scheduler
	}{
		{simulator.TopologySecondScheduler, nil, "gpushare-scheduler-config", "gpushare-scheduler", func() *simulator.Scheduler {
			s := simulator.ShippedScheduler
			return &s
		}},
		{simulator.TopologyExtender, map[string]any{"topology": "extender"}, "gpushare-kube-scheduler-config", "default-scheduler", func() *simulator.Scheduler {
			s := simulator.ShippedScheduler
			return &s
		}},
		{simulator.TopologyExtender, map[string]any{"topology": "extender", "extender": map[string]any{"scoreCPUPods": true}}, "gpushare-kube-scheduler-config", "default-scheduler",
			func() *simulator.Scheduler {
				s := simulator.ShippedScheduler
				s.GPUPrioritizeWeight, s.CPUPrioritizeWeight = 1, 1
				return &s
			}},
	} {
		t.Run(string(tc.topology)+tcName(tc.values), func(t *testing.T) {
			cfg := schedulerConfig(t, objects(t, render(t, c, tc.values)), tc.configMap)
			data, err := yaml.Marshal(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := simulator.ParseSchedulerConfigProfile(data, tc.profile)
			if err != nil {
				t.Fatalf("the simulator cannot read the chart's configuration: %v", err)
			}
			if diff := cmp.Diff(tc.want(), got); diff != "" {
				t.Errorf("the chart's kube-scheduler configuration replays otherwise (-simulator +chart):\n%s", diff)
			}
			replayed, err := simulator.ForTopology(tc.topology, got)
			if err != nil {
				t.Fatal(err)
			}
			cpu := replayed
			if replayed.CPU != nil {
				cpu = replayed.CPU
			}
			if tc.topology == simulator.TopologySecondScheduler && cmp.Diff(&simulator.DefaultKubeScheduler, cpu) != "" {
				t.Errorf("second-scheduler: the pods that ask no GPU memory are replayed by %+v, not the cluster's defaults", cpu)
			}
		})
	}
	if _, err := Render(c, map[string]any{"extender": map[string]any{"scoreCPUPods": true}}, nil); err == nil || !strings.Contains(err.Error(), "needs topology: extender") {
		t.Errorf("scoreCPUPods in the second-scheduler topology renders (%v); want it refused", err)
	}
}

func tcName(values map[string]any) string {
	if e, ok := values["extender"].(map[string]any); ok && e["scoreCPUPods"] == true {
		return "/scoreCPUPods"
	}
	return ""
}
