package simulator

import (
	"io"
	"os"
	"testing"

	"sigs.k8s.io/yaml"
)

// shippedSchedulerConfig is the kube-scheduler configuration we ship.
const shippedSchedulerConfig = "../../config/kube-scheduler-config.yaml"

// TestShippedPercentageOfNodesToScore fails when the simulator's default
// replays another percentageOfNodesToScore than the shipped kube-scheduler
// configuration sets for its default profile (the profile's own value if
// set, else the top-level one, else kube-scheduler's default, 0).
func TestShippedPercentageOfNodesToScore(t *testing.T) {
	data, err := os.ReadFile(shippedSchedulerConfig)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		PercentageOfNodesToScore *int32 `json:"percentageOfNodesToScore"`
		Profiles                 []struct {
			SchedulerName            string `json:"schedulerName"`
			PercentageOfNodesToScore *int32 `json:"percentageOfNodesToScore"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("parsing %s: %v", shippedSchedulerConfig, err)
	}
	var shipped int32 // kube-scheduler's default: adaptive
	if cfg.PercentageOfNodesToScore != nil {
		shipped = *cfg.PercentageOfNodesToScore
	}
	for _, p := range cfg.Profiles {
		if (p.SchedulerName == "" || p.SchedulerName == "default-scheduler") && p.PercentageOfNodesToScore != nil {
			shipped = *p.PercentageOfNodesToScore
		}
	}
	if shipped != DefaultPercentageOfNodesToScore {
		t.Errorf("%s sets percentageOfNodesToScore %d (0: unset, adaptive); the simulator replays %d by default", shippedSchedulerConfig, shipped, DefaultPercentageOfNodesToScore)
	}
	flags, err := parseFlags([]string{"--nodes", sliceNodes, "--pods", slicePods}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := *flags.PercentageOfNodesToScore; got != shipped {
		t.Errorf("--percentage-of-nodes-to-score defaults to %d; %s sets %d", got, shippedSchedulerConfig, shipped)
	}
}
