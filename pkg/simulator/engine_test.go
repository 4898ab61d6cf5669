package simulator

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// tinyTrace parses openb CSV rows (without headers).
func tinyTrace(t *testing.T, nodes, pods string) *trace.Trace {
	t.Helper()
	ns, err := trace.ReadOpenbNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\n"+nodes), "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := trace.ReadOpenbPods(strings.NewReader("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"+pods), "pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	return &trace.Trace{Nodes: ns, Pods: ps}
}

func TestArrivals(t *testing.T) {
	// Capacity 2000 units; the pods ask 1500; 130% is 2600.
	tr := tinyTrace(t, "n0,8000,8192,2,T4\n", "c,100,10,1,500,\na,100,10,1,500,\nb,100,10,1,500,\ncpu,100,10,0,0,\n")
	order, err := Arrivals(tr, 42, 1.3)
	if err != nil {
		t.Fatal(err)
	}
	first := slices.Clone(order[:4])
	slices.Sort(first)
	if diff := cmp.Diff([]int{0, 1, 2, 3}, first); diff != "" {
		t.Errorf("the first pods are not the trace's, once each (-want +got):\n%s", diff)
	}
	var total int64
	for k, i := range order {
		total += tr.Pods[i].Units()
		if k < len(order)-1 && total > 2600 {
			t.Fatalf("demand %d passed 130%% before the last pod (%d of %d)", total, k, len(order))
		}
	}
	if total <= 2600 {
		t.Errorf("demand %d never passed 130%% of 2000", total)
	}
	again, _ := Arrivals(tr, 42, 1.3)
	if diff := cmp.Diff(order, again); diff != "" {
		t.Errorf("same seed, other order (-first +second):\n%s", diff)
	}
	// Sorting by name first: the file's order does not matter.
	swapped := &trace.Trace{Nodes: tr.Nodes, Pods: []trace.Pod{tr.Pods[1], tr.Pods[2], tr.Pods[0], tr.Pods[3]}}
	other, _ := Arrivals(swapped, 42, 1.3)
	names := func(tr *trace.Trace, order []int) (out []string) {
		for _, i := range order[:4] {
			out = append(out, tr.Pods[i].Name)
		}
		return out
	}
	if diff := cmp.Diff(names(tr, order), names(swapped, other)); diff != "" {
		t.Errorf("the shuffle depends on the file's order (-want +got):\n%s", diff)
	}
}

func TestRunConstraints(t *testing.T) {
	tests := []struct {
		name  string
		nodes string
		pods  string
		// wantNodes: pod name -> node ("" failed), for the trace's pods.
		wantNodes map[string]string
	}{
		{
			name:      "CPU must fit",
			nodes:     "big-gpu-small-cpu,4000,65536,1,T4\nsmall,64000,65536,1,T4\n",
			pods:      "p,8000,1024,1,1000,\n",
			wantNodes: map[string]string{"p": "small"},
		},
		{
			name:      "memory must fit",
			nodes:     "a,64000,1024,1,T4\nb,64000,65536,1,T4\n",
			pods:      "p,1000,4096,1,1000,\n",
			wantNodes: map[string]string{"p": "b"},
		},
		{
			name:      "gpu_spec names the models",
			nodes:     "t4,64000,65536,1,T4\nv100,64000,65536,1,V100M32\np100,64000,65536,1,P100\n",
			pods:      "p,1000,1024,1,1000,V100M32|A10\n",
			wantNodes: map[string]string{"p": "v100"},
		},
		{
			name:      "a multi-GPU task needs whole cards on one node",
			nodes:     "a,64000,65536,2,T4\nb,64000,65536,4,T4\n",
			pods:      "p,1000,1024,4,1000,\n",
			wantNodes: map[string]string{"p": "b"},
		},
		{
			name:      "fits nowhere: failed",
			nodes:     "a,64000,65536,2,T4\n",
			pods:      "p,1000,1024,4,1000,\n",
			wantNodes: map[string]string{"p": ""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr := tinyTrace(t, tc.nodes, tc.pods)
			for _, policy := range allocator.PolicyNames() {
				res, err := Run(context.Background(), tr, Options{Policy: policy, Seed: 1, Record: true})
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]string{}
				for _, d := range res.Decisions {
					if _, ok := tc.wantNodes[d.Pod]; ok {
						got[d.Pod] = d.Node
					}
				}
				if diff := cmp.Diff(tc.wantNodes, got); diff != "" {
					t.Errorf("%s: nodes (-want +got):\n%s", policy, diff)
				}
			}
		})
	}
}

// TestAllocAt follows a hand-made replay: one card of 1000 units; pods of
// 400, 400 and 400 (clones add more): after the first, 40% arrived and
// allocated; after the second, 80% and 80%; the third fails at 120%.
func TestAllocAt(t *testing.T) {
	tr := tinyTrace(t, "n,64000,65536,1,T4\n", "a,1,1,1,400,\nb,1,1,1,400,\nc,1,1,1,400,\n")
	res, err := Run(context.Background(), tr, Options{Policy: allocator.NameBinpack, Seed: 3, Inflate: 1.1})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		x    int
		want float64
	}{{40, 40}, {50, 40}, {80, 80}, {100, 80}, {120, 80}} {
		if got := res.AllocAt(tc.x); got != tc.want {
			t.Errorf("AllocAt(%d) = %v, want %v", tc.x, got, tc.want)
		}
	}
	if got := res.AllocAt(130); !math.IsNaN(got) {
		t.Errorf("AllocAt(130) = %v, want NaN (arrival stopped at 120%%)", got)
	}
	if diff := cmp.Diff(map[trace.Kind]int{trace.KindShare: 1}, res.Failed); diff != "" {
		t.Errorf("failed (-want +got):\n%s", diff)
	}
	if res.Pods != 3 {
		t.Errorf("pods = %d, want 3 (120%% already passes 110%%)", res.Pods)
	}

	// Pods of 1 unit: arrival stops at 109.1%, which rounds to 109: 110%
	// was never reached, though 1.09 rounds to 109 buckets and more.
	res, err = Run(context.Background(), tinyTrace(t, "n,64000,65536,1,T4\n", "a,1,1,1,1,\nb,1,1,1,1,\n"),
		Options{Policy: allocator.NameBinpack, Seed: 3, Inflate: 1.09})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.AllocAt(109); got != 100 {
		t.Errorf("AllocAt(109) = %v, want 100 (the card is full)", got)
	}
	if got := res.AllocAt(110); !math.IsNaN(got) {
		t.Errorf("AllocAt(110) = %v, want NaN (arrival stopped at 109.1%%)", got)
	}
}

// TestRunReproducible: the same seed gives the same decisions, ties
// included; another seed breaks ties differently.
func TestRunReproducible(t *testing.T) {
	var nodes, pods strings.Builder
	for i := range 20 {
		nodes.WriteString("n" + string(rune('a'+i)) + ",64000,65536,2,T4\n")
	}
	for i := range 30 {
		pods.WriteString("p" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ",1000,1024,1,500,\n")
	}
	tr := tinyTrace(t, nodes.String(), pods.String())
	run := func(policy string, seed uint64) []Decision {
		res, err := Run(context.Background(), tr, Options{Policy: policy, Seed: seed, Record: true})
		if err != nil {
			t.Fatal(err)
		}
		return res.Decisions
	}
	for _, policy := range allocator.PolicyNames() {
		if diff := cmp.Diff(run(policy, 5), run(policy, 5)); diff != "" {
			t.Errorf("%s: seed 5 twice (-first +second):\n%s", policy, diff)
		}
	}
	if cmp.Equal(run(allocator.NameSpread, 5), run(allocator.NameSpread, 6)) {
		t.Error("spread: seeds 5 and 6 broke the ties among 20 empty nodes alike")
	}
}

func TestRunCPUPods(t *testing.T) {
	tr := tinyTrace(t, "a,8000,8192,1,T4\nb,16000,8192,1,T4\n", "g,1000,1024,1,1000,\ncpu1,4000,1024,0,0,\ncpu2,4000,1024,0,0,\n")
	res, err := Run(context.Background(), tr, Options{Policy: allocator.NameBinpack, Seed: 1, Record: true, CPUPods: CPUPodsSkip})
	if err != nil {
		t.Fatal(err)
	}
	if res.Skipped < 2 || len(res.Decisions) != res.Pods-res.Skipped {
		t.Errorf("skip: %d skipped, %d decisions of %d pods", res.Skipped, len(res.Decisions), res.Pods)
	}
	// The default: placed as kube-scheduler would; binpack has no CPU
	// rule, so the extender rates every node alike.
	res, err = Run(context.Background(), tr, Options{Policy: allocator.NameBinpack, Seed: 1, Record: true})
	if err != nil {
		t.Fatal(err)
	}
	first := true
	for _, d := range res.Decisions {
		if d.Pod != "cpu1" && d.Pod != "cpu2" {
			continue
		}
		if d.Node == "" {
			t.Errorf("%s failed; 24 cores were free", d.Pod)
		}
		// b has twice the CPU: NodeResourcesFit (LeastAllocated) and
		// BalancedAllocation put the first CPU pod there, wherever g
		// went (b scores at least 81 + 93, a at most 68 + 93).
		if first && d.Node != "b" {
			t.Errorf("first CPU pod %s on %q, want b", d.Pod, d.Node)
		}
		first = false
	}
	if res.Skipped != 0 {
		t.Errorf("place: %d skipped", res.Skipped)
	}
	if _, err := Run(context.Background(), tr, Options{Policy: allocator.NameBinpack, CPUPods: "pack"}); err == nil {
		t.Error("CPUPods pack accepted")
	}
}

func TestRunErrors(t *testing.T) {
	tr := tinyTrace(t, "a,8000,8192,1,T4\n", "g,1000,1024,1,1000,\n")
	tests := []struct {
		name string
		tr   *trace.Trace
		opts Options
		want string
	}{
		{"unknown policy", tr, Options{Policy: "worstfit"}, `unknown policy "worstfit"; want one of bestfit, binpack, fgd, fragaware, random, spread`},
		{"no GPU", tinyTrace(t, "a,8000,8192,0,\n", "g,1000,1024,1,1000,\n"), Options{Policy: "binpack"}, "the 1 nodes have no healthy GPU: nothing to allocate"},
		{"no GPU pod", tinyTrace(t, "a,8000,8192,1,T4\n", "c,1000,1024,0,0,\n"), Options{Policy: "binpack"}, "none of the 1 pods asks GPU memory"},
		{"percentage out of range", tr, Options{Policy: "binpack", PercentageOfNodesToScore: ptr.To[int32](-1)}, "percentageOfNodesToScore -1: want 0 (kube-scheduler's adaptive default) to 100"},
		{"mixed units", &trace.Trace{Nodes: []trace.Node{{Name: "a", Unit: "GiB", Cards: []allocator.Card{{Total: 16, Healthy: true}}}, {Name: "b", Unit: "MiB", Cards: []allocator.Card{{Total: 16384, Healthy: true}}}}, Pods: tr.Pods},
			Options{Policy: "binpack"}, "node b counts GPU memory in MiB but node a in GiB; the simulator needs one unit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.tr, tc.opts)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIdleTaint: a node of 4 cards none of which holds GPU memory carries
// the device plugin's gpushare.io/idle-gpus taint, which kube-scheduler's
// TaintToleration weighs (300 points with the default weight 3) for a pod
// that asks no GPU memory: it goes to the node whose cards are in use,
// where NodeResourcesFit (LeastAllocated) alone would prefer the idle,
// emptier one. 2-card nodes are never tainted, and 0 turns the taint off.
func TestIdleTaint(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cards   int
		minimum *int
		want    string
	}{
		{"4 cards: the idle node is tainted", 4, nil, "busy"},
		{"taint off", 4, ptr.To(0), "idle"},
		{"2 cards are never tainted", 2, nil, "idle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := tinyTrace(t, fmt.Sprintf("busy,64000,262144,%d,T4\nidle,64000,262144,%d,T4\n", tc.cards, tc.cards), "g,1000,1024,1,500,\ncpu,4000,1024,0,0,\n")
			s, err := NewStepper(tr, Options{Policy: allocator.NameBinpack, IdleTaintMinCards: tc.minimum})
			if err != nil {
				t.Fatal(err)
			}
			g, cpu := &tr.Pods[0], &tr.Pods[1]
			s.Choices(g)
			if _, err := s.Place("busy"); err != nil {
				t.Fatal(err)
			}
			ch := s.Choices(cpu)
			if diff := cmp.Diff([]string{tc.want}, ch.Best); diff != "" {
				t.Errorf("nodes kube-scheduler rates best for the CPU pod (-want +got):\n%s", diff)
			}
		})
	}
}
