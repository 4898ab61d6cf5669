package simulator

import (
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// shippedSchedulerConfig is the kube-scheduler configuration we ship;
// optInSchedulerConfig the opt-in one that sends every pod to the
// extender's prioritize.
const (
	shippedSchedulerConfig = "../../config/kube-scheduler-config.yaml"
	optInSchedulerConfig   = "../../config/kube-scheduler-config-score-cpu-pods.yaml"
)

// TestShippedScheduler fails when the simulator's default replays another
// kube-scheduler configuration than the one we ship: its
// percentageOfNodesToScore, kube-scheduler's own scoring and the extender
// entries' prioritize weights for GPU and CPU-only pods.
func TestShippedScheduler(t *testing.T) {
	shipped, err := ReadSchedulerConfig(shippedSchedulerConfig)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(shipped, &ShippedScheduler); diff != "" {
		t.Errorf("%s and ShippedScheduler, the simulator's default, differ (-shipped +simulator):\n%s", shippedSchedulerConfig, diff)
	}
	if shipped.PercentageOfNodesToScore != DefaultPercentageOfNodesToScore {
		t.Errorf("%s sets percentageOfNodesToScore %d; DefaultPercentageOfNodesToScore is %d", shippedSchedulerConfig, shipped.PercentageOfNodesToScore, DefaultPercentageOfNodesToScore)
	}
	flags, err := parseFlags([]string{"--nodes", sliceNodes, "--pods", slicePods}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if flags.SchedulerFile != "" || flags.Scheduler != nil || flags.PercentageOfNodesToScore != nil || flags.CPUPods != CPUPodsPlace {
		t.Errorf("simulate's defaults: --scheduler-config %q (%v), --percentage-of-nodes-to-score %v, --cpu-pods %s; want the shipped configuration, its percentage, and place",
			flags.SchedulerFile, flags.Scheduler, flags.PercentageOfNodesToScore, flags.CPUPods)
	}
}
