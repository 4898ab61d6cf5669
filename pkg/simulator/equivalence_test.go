package simulator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
	"github.com/gpushare/gpushare/test/util"
)

// optInSchedulerConfig is the opt-in kube-scheduler configuration that
// sends every pod to the extender's prioritize.
const optInSchedulerConfig = "../../config/kube-scheduler-config-score-cpu-pods.yaml"

// equivalenceCluster returns Kubernetes nodes of mixed cards, CPU and
// memory, and pending pods asking 150% of their GPU memory (so Run appends
// no clones), a tenth of them CPU-only when cpuOnly, as the extender would
// see them, seeded. constrained: the cards are of several models (one node
// mixes two), a card is cordoned, a node has no inventory, and about half
// the pods choose cards by model or UUID.
func equivalenceCluster(seed uint64, cpuScale int64, cpuOnly, constrained bool) ([]*corev1.Node, []*corev1.Pod) {
	r := rand.New(rand.NewPCG(seed, 9))
	shapes := [][]int64{{16, 16}, {32, 32, 32, 32}, {80}, {24, 24, 24, 24, 24, 24, 24, 24}, {16, 32}}
	models := []string{"Tesla T4", "A100-SXM4-80GB", "H100 80GB HBM3"}
	var nodes []*corev1.Node
	var capacity int64
	for i := range 12 {
		sizes := shapes[i%len(shapes)]
		model := "GPU"
		if constrained {
			model = models[i%len(models)]
		}
		w := util.MakeNode(fmt.Sprintf("node-%02d", i)).Cards(model, sizes...)
		if constrained && len(sizes) == 2 && sizes[0] != sizes[1] {
			// Mixed: a T4 beside an A100.
			inv, err := gpushare.ParseInventory(w.Annotations[gpushare.AnnotationInventory])
			if err != nil {
				panic(err)
			}
			inv.Devices[0].Model, inv.Devices[1].Model = "Tesla T4", "A100-SXM4-80GB"
			w.Inventory(inv)
		}
		if constrained && i == 3 {
			w.Cordon(fmt.Sprintf("GPU-node-%02d-1", i), "GPU-gone")
		}
		n := w.Obj()
		cpu := resource.NewMilliQuantity(cpuScale*int64(4+r.IntN(28)), resource.DecimalSI)
		mem := resource.NewQuantity(int64(16+r.IntN(48))<<30, resource.BinarySI)
		n.Status.Allocatable[corev1.ResourceCPU], n.Status.Capacity[corev1.ResourceCPU] = *cpu, *cpu
		n.Status.Allocatable[corev1.ResourceMemory], n.Status.Capacity[corev1.ResourceMemory] = *mem, *mem
		nodes = append(nodes, n)
		for _, s := range sizes {
			capacity += s
		}
	}
	if constrained {
		// No inventory: cards of unknown model and UUID.
		n := util.MakeNode("node-12").Capacity(64, 2).Obj()
		cpu := resource.NewMilliQuantity(cpuScale*int64(4+r.IntN(28)), resource.DecimalSI)
		mem := resource.NewQuantity(int64(16+r.IntN(48))<<30, resource.BinarySI)
		n.Status.Allocatable[corev1.ResourceCPU], n.Status.Capacity[corev1.ResourceCPU] = *cpu, *cpu
		n.Status.Allocatable[corev1.ResourceMemory], n.Status.Capacity[corev1.ResourceMemory] = *mem, *mem
		nodes = append(nodes, n)
		capacity += 64
	}
	var pods []*corev1.Pod
	var asked int64
	for i := 0; asked < capacity*3/2; i++ {
		w := util.MakePod(fmt.Sprintf("pod-%03d", i))
		switch k := r.IntN(10); {
		case cpuOnly && k == 0:
			w.Container("cpu")
		case k < 6:
			u := []int64{2, 3, 4, 6, 8, 12}[r.IntN(6)]
			w.GPUMem(u)
			asked += u
		case k < 8:
			u := []int64{16, 24, 32}[r.IntN(3)]
			w.GPUMem(u)
			asked += u
		case k < 9:
			w.GPUMemCards(32, 2)
			asked += 32
		default:
			w.GPUMem(4).GPUMem(6) // two containers
			asked += 10
		}
		if constrained {
			switch k := r.IntN(8); {
			case k < 2:
				w.GPUModels([]string{"A100*", "Tesla-T4", "*80GB*", "H100*,Tesla T4"}[r.IntN(4)])
			case k < 3:
				w.Annotation(gpushare.AnnotationGPUModelsExcluded, "*T4")
			case k < 4:
				w.Annotation(gpushare.AnnotationGPUUUIDsExcluded, fmt.Sprintf("GPU-node-%02d-0", r.IntN(12)))
			case k < 5:
				node := r.IntN(12)
				w.Annotation(gpushare.AnnotationGPUUUIDs, fmt.Sprintf("GPU-node-%02d-0,GPU-node-%02d-1", node, node))
			}
		}
		p := w.Obj()
		req := p.Spec.Containers[0].Resources.Requests
		if req == nil {
			req = corev1.ResourceList{}
			p.Spec.Containers[0].Resources.Requests = req
		}
		req[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(500+r.IntN(4000)), resource.DecimalSI)
		req[corev1.ResourceMemory] = *resource.NewQuantity(int64(1+r.IntN(8))<<30, resource.BinarySI)
		p.UID = types.UID(p.Name)
		pods = append(pods, p)
	}
	return nodes, pods
}

// TestSimulatorMatchesExtender drives the simulator (a Stepper) and the
// extender's cache with the same nodes and pod sequence. For every pod that
// asks GPU memory the cache must find it fitting on the same nodes (among
// those whose CPU and memory fit, as kube-scheduler passes them), pass the
// same nodes in FilterBest, score them alike in Score, and give it the same
// cards on the node chosen; for every pod that asks none, ScoreCPU must
// score the nodes as the simulator's extender does. The node is drawn
// among the simulator's best, as kube-scheduler draws among ties.
func TestSimulatorMatchesExtender(t *testing.T) {
	tests := []struct {
		name    string
		policy  string
		gpuOnly bool
		// cpuScale: millicores per "core" of node CPU; 1000 makes CPU
		// bind, 1000000 makes it never bind.
		cpuScale int64
		cpuOnly  bool
		// constrained: pods choose cards by model and UUID, a card is
		// cordoned (see equivalenceCluster).
		constrained bool
	}{
		{"binpack", allocator.NameBinpack, false, 1000, false, false},
		{"spread", allocator.NameSpread, false, 1000, false, false},
		{"bestfit, CPU binding", allocator.NameBestFit, false, 1000, false, false},
		{"bestfit, GPU only", allocator.NameBestFit, true, 1000, false, false},
		{"fragaware, CPU binding", allocator.NameFragAware, false, 1000, false, false},
		{"fragaware, GPU only, CPU binding", allocator.NameFragAware, true, 1000, false, false},
		{"fragaware, with CPU that never binds", allocator.NameFragAware, false, 1000000, false, false},
		{"fragaware, CPU-only pods, CPU binding", allocator.NameFragAware, false, 1000, true, false},
		{"fgd, CPU-only pods, CPU binding", allocator.NameFGD, false, 1000, true, false},
		{"binpack, CPU-only pods", allocator.NameBinpack, false, 1000, true, false},
		{"binpack, card constraints", allocator.NameBinpack, false, 1000, false, true},
		{"bestfit, card constraints", allocator.NameBestFit, false, 1000, false, true},
		{"fragaware, card constraints", allocator.NameFragAware, false, 1000, false, true},
		{"fragaware, card constraints, CPU-only pods", allocator.NameFragAware, false, 1000, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 3; seed++ {
				matchExtender(t, seed, tc.policy, tc.gpuOnly, tc.cpuScale, tc.cpuOnly, tc.constrained)
			}
		})
	}
}

func matchExtender(t *testing.T, seed uint64, policy string, gpuOnly bool, cpuScale int64, cpuOnly, constrained bool) {
	t.Helper()
	nodes, pods := equivalenceCluster(seed, cpuScale, cpuOnly, constrained)
	tr, err := trace.TraceOf(nodes, pods)
	if err != nil {
		t.Fatal(err)
	}
	if policy == allocator.NameFGD {
		// The extender's FGD learns its target workload as fragaware
		// does; the simulator's takes the trace's (TargetTasks). Only the
		// CPU-only pods' scores are compared for fgd, on a workload
		// both know alike: none (every free unit is fragment, so only the
		// CPU test of tasks matters, and there are none).
		tr.Pods = slices.DeleteFunc(tr.Pods, func(p trace.Pod) bool { return p.Demand != nil })
		tr.Pods = append(tr.Pods, trace.Pod{Name: "zz-gpu", Demand: gpushare.Demand{{Name: "c", Units: 1, Cards: 1}}, Kind: trace.KindShare})
	}
	// The opt-in configuration, whose every-pod entry sends the CPU-only
	// pods to the extender's prioritize too, so that its scores for them
	// are compared (the shipped one sends them nowhere).
	optIn, err := ReadSchedulerConfig(optInSchedulerConfig)
	if err != nil {
		t.Fatal(err)
	}
	if optIn.CPUPrioritizeWeight == 0 {
		t.Fatalf("%s sends the pods that ask no GPU memory to no prioritize", optInSchedulerConfig)
	}
	s, err := NewStepper(tr, Options{Policy: policy, Seed: seed, GPUOnly: gpuOnly, Scheduler: optIn})
	if err != nil {
		t.Fatal(err)
	}

	c, err := cache.New(cache.Config{Policy: policy, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	if err != nil {
		t.Fatal(err)
	}
	cpuFree, memFree := map[string]int64{}, map[string]int64{}
	var names []string
	for _, n := range nodes {
		cpuFree[n.Name], memFree[n.Name], _ = cache.NodeAllocatable(n)
		names = append(names, n.Name)
		if gpuOnly {
			// A node that reports no CPU is scored by its cards alone.
			n = n.DeepCopy()
			for _, rl := range []corev1.ResourceList{n.Status.Allocatable, n.Status.Capacity} {
				delete(rl, corev1.ResourceCPU)
			}
		}
		if err := c.SetNode(n); err != nil {
			t.Fatal(err)
		}
	}
	byName := map[string]*corev1.Pod{}
	for _, p := range pods {
		byName[p.Namespace+"/"+p.Name] = p
	}
	pick := rand.New(rand.NewPCG(seed, 10))
	placed, cpuPlaced, constrainedPlaced := 0, 0, 0
	for i := range tr.Pods {
		sp := &tr.Pods[i]
		pod := byName[sp.Name]
		if pod == nil {
			continue
		}
		ch := s.Choices(sp)
		info := kubeinfo.NewPodInfo(pod)
		c.UpsertPod(pod) // the pending pod: the cache learns its shape
		var candidates []string
		for _, n := range names {
			if cpuFree[n] >= info.MilliCPU && memFree[n] >= info.MemoryMiB {
				candidates = append(candidates, n)
			}
		}
		if sp.Demand == nil {
			if diff := cmp.Diff(ch.Fit, candidates, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("seed %d, pod %d %s: nodes where the CPU-only pod fits (-simulator +test):\n%s", seed, i, sp.Name, diff)
			}
			if len(candidates) > 0 {
				scores, err := c.ScoreCPU(context.Background(), info, candidates)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(ch.Prio, scores); diff != "" {
					t.Fatalf("seed %d, pod %d %s: prioritize scores of %v (-simulator +extender):\n%s", seed, i, sp.Name, candidates, diff)
				}
			}
		} else {
			fit, _, err := c.Filter(context.Background(), info, candidates)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ch.Fit, fit, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("seed %d, pod %d %s: nodes where it fits (-simulator +extender):\n%s", seed, i, sp.Name, diff)
			}
			best, _, err := c.FilterBest(context.Background(), info, candidates)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ch.Extender, best, cmpopts.EquateEmpty()); diff != "" {
				t.Fatalf("seed %d, pod %d %s: nodes the filter passes (-simulator +extender):\n%s", seed, i, sp.Name, diff)
			}
			if len(best) > 0 {
				scores, err := c.Score(context.Background(), info, best)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(ch.Prio, scores); diff != "" {
					t.Fatalf("seed %d, pod %d %s: prioritize scores of %v (-simulator +extender):\n%s", seed, i, sp.Name, best, diff)
				}
			}
		}
		node := ""
		if len(ch.Best) > 0 {
			node = ch.Best[pick.IntN(len(ch.Best))]
		}
		cards, err := s.Place(node)
		if err != nil {
			t.Fatal(err)
		}
		if node == "" {
			continue
		}
		cpuFree[node] -= info.MilliCPU
		memFree[node] -= info.MemoryMiB
		if sp.Demand == nil {
			bound := pod.DeepCopy()
			bound.Spec.NodeName = node
			c.UpsertPod(bound)
			cpuPlaced++
			continue
		}
		alloc, err := c.Assume(context.Background(), info, node)
		if err != nil {
			t.Fatal(err)
		}
		var got [][]int
		for _, ca := range alloc.Containers {
			var idx []int
			for _, dev := range ca.Devices {
				idx = append(idx, dev.Index)
			}
			got = append(got, idx)
		}
		// The same cards per container; the annotation lists them by index.
		var simCards [][]int
		for _, idx := range cards {
			simCards = append(simCards, slices.Sorted(slices.Values(idx)))
		}
		if diff := cmp.Diff(simCards, got); diff != "" {
			t.Fatalf("seed %d, pod %d %s on %s: cards (-simulator +extender):\n%s", seed, i, sp.Name, node, diff)
		}
		c.FinishBinding(pod.UID)
		placed++
		if info.Constraints != nil {
			constrainedPlaced++
		}
	}
	if policy != allocator.NameFGD && placed < len(tr.Pods)/3 {
		t.Errorf("seed %d: only %d of %d pods placed; the test exercises little", seed, placed, len(tr.Pods))
	}
	if cpuOnly && cpuPlaced == 0 {
		t.Errorf("seed %d: no CPU-only pod placed", seed)
	}
	if constrained && constrainedPlaced < placed/4 {
		t.Errorf("seed %d: only %d of the %d pods placed choose their cards; the test exercises little", seed, constrainedPlaced, placed)
	}
}
