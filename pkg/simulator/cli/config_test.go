package cli

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpushare/gpushare/pkg/simulator"
)

// shippedSchedulerConfig is the kube-scheduler configuration we ship.
const shippedSchedulerConfig = "../../../config/kube-scheduler-config.yaml"

// TestShippedScheduler fails when the simulator's default replays another
// kube-scheduler configuration than the one we ship: its
// percentageOfNodesToScore, kube-scheduler's own scoring and the extender
// entries' prioritize weights for GPU and CPU-only pods.
func TestShippedScheduler(t *testing.T) {
	shipped, err := simulator.ReadSchedulerConfig(shippedSchedulerConfig)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(shipped, &simulator.ShippedScheduler); diff != "" {
		t.Errorf("%s and ShippedScheduler, the simulator's default, differ (-shipped +simulator):\n%s", shippedSchedulerConfig, diff)
	}
	if shipped.PercentageOfNodesToScore != simulator.DefaultPercentageOfNodesToScore {
		t.Errorf("%s sets percentageOfNodesToScore %d; DefaultPercentageOfNodesToScore is %d", shippedSchedulerConfig, shipped.PercentageOfNodesToScore, simulator.DefaultPercentageOfNodesToScore)
	}
	flags, err := parseFlags([]string{"--nodes", sliceNodes, "--pods", slicePods}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if flags.SchedulerFile != "" || flags.Scheduler != nil || flags.PercentageOfNodesToScore != nil || flags.CPUPods != simulator.CPUPodsPlace {
		t.Errorf("simulate's defaults: --scheduler-config %q (%v), --percentage-of-nodes-to-score %v, --cpu-pods %s; want the shipped configuration, its percentage, and place",
			flags.SchedulerFile, flags.Scheduler, flags.PercentageOfNodesToScore, flags.CPUPods)
	}
}

// TestGPUSpecAsFlag: --gpu-spec-as chooses how the GPU-model variant
// states a one-model constraint, and refuses anything but annotation or
// label.
func TestGPUSpecAsFlag(t *testing.T) {
	for _, tc := range []struct {
		arg     string
		want    bool
		wantErr string
	}{
		{arg: "", want: false},
		{arg: "annotation", want: false},
		{arg: "label", want: true},
		{arg: "labels", wantErr: `--gpu-spec-as "labels": want annotation or label`},
	} {
		args := []string{"--nodes", sliceNodes, "--pods", slicePods, "--gpu-spec-share", "30"}
		if tc.arg != "" {
			args = append(args, "--gpu-spec-as", tc.arg)
		}
		cfg, err := parseFlags(args, io.Discard, io.Discard)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("--gpu-spec-as %q: error %v, want %q", tc.arg, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("--gpu-spec-as %q: %v", tc.arg, err)
		}
		if cfg.Variant.GPUSpecAsLabel != tc.want || cfg.Variant.GPUSpecShare != 0.3 {
			t.Errorf("--gpu-spec-as %q: GPUSpecAsLabel %v, share %g; want %v and 0.3", tc.arg, cfg.Variant.GPUSpecAsLabel, cfg.Variant.GPUSpecShare, tc.want)
		}
	}
}

// TestGPUSpecModelsFlag: --gpu-spec-models sets the most models a
// restricted pod gets, 2 by default, and refuses what is not 1 to 3.
func TestGPUSpecModelsFlag(t *testing.T) {
	for _, tc := range []struct {
		arg     string
		want    int
		wantErr string
	}{
		{arg: "", want: 2},
		{arg: "1", want: 1},
		{arg: "3", want: 3},
		{arg: "0", wantErr: `--gpu-spec-models 0: want 1 to 3`},
		{arg: "4", wantErr: `--gpu-spec-models 4: want 1 to 3`},
	} {
		args := []string{"--nodes", sliceNodes, "--pods", slicePods, "--gpu-spec-share", "30"}
		if tc.arg != "" {
			args = append(args, "--gpu-spec-models", tc.arg)
		}
		cfg, err := parseFlags(args, io.Discard, io.Discard)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("--gpu-spec-models %q: error %v, want %q", tc.arg, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("--gpu-spec-models %q: %v", tc.arg, err)
		}
		if cfg.Variant.GPUSpecModels != tc.want {
			t.Errorf("--gpu-spec-models %q: GPUSpecModels %d, want %d", tc.arg, cfg.Variant.GPUSpecModels, tc.want)
		}
	}
}

// TestKubeSchedulerVersionFlag: --kube-scheduler-version picks the scoring
// the replay follows (v1.34 by default; 1.36 and later score the gain in
// balance) and refuses what is not a Kubernetes 1.x version.
func TestKubeSchedulerVersionFlag(t *testing.T) {
	for _, tc := range []struct {
		arg      string
		wantGain bool
		wantErr  bool
	}{
		{arg: "", wantGain: false},
		{arg: "v1.35.4", wantGain: false},
		{arg: "v1.36", wantGain: true},
		{arg: "1.37.2", wantGain: true},
		{arg: "v2.0", wantErr: true},
	} {
		args := []string{"--nodes", sliceNodes, "--pods", slicePods, "--policy", "fragaware", "--seeds", "1", "--format", "csv"}
		if tc.arg != "" {
			args = append(args, "--kube-scheduler-version", tc.arg)
		}
		cfg, err := parseFlags(args, io.Discard, io.Discard)
		if tc.wantErr {
			if err == nil || !strings.Contains(err.Error(), "--kube-scheduler-version") {
				t.Errorf("--kube-scheduler-version %q: error %v, want one naming the flag", tc.arg, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("--kube-scheduler-version %q: %v", tc.arg, err)
		}
		if err := Simulate(context.Background(), cfg, io.Discard); err != nil {
			t.Fatal(err)
		}
		if cfg.Scheduler.BalanceGain != tc.wantGain {
			t.Errorf("--kube-scheduler-version %q: the replay's BalanceGain %v, want %v", tc.arg, cfg.Scheduler.BalanceGain, tc.wantGain)
		}
	}
}
