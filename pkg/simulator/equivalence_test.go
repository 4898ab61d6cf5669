package simulator

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// equivalenceCluster returns Kubernetes nodes of mixed cards and CPU, and
// pending pods asking 150% of their GPU memory (so Run appends no clones),
// as the extender would see them, seeded. constrained: the cards are of
// several models (one node mixes two), a card is cordoned, a node has no
// inventory, and about half the pods choose cards by model or UUID.
func equivalenceCluster(seed uint64, cpuScale int64, constrained bool) ([]*corev1.Node, map[string]*corev1.Pod) {
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
		n.Status.Allocatable[corev1.ResourceCPU], n.Status.Capacity[corev1.ResourceCPU] = *cpu, *cpu
		nodes = append(nodes, n)
		for _, s := range sizes {
			capacity += s
		}
	}
	if constrained {
		// No inventory: cards of unknown model and UUID.
		n := util.MakeNode("node-12").Capacity(64, 2).Obj()
		cpu := resource.NewMilliQuantity(cpuScale*int64(4+r.IntN(28)), resource.DecimalSI)
		n.Status.Allocatable[corev1.ResourceCPU], n.Status.Capacity[corev1.ResourceCPU] = *cpu, *cpu
		nodes = append(nodes, n)
		capacity += 64
	}
	pods := map[string]*corev1.Pod{}
	var asked int64
	for i := 0; asked < capacity*3/2; i++ {
		w := util.MakePod(fmt.Sprintf("pod-%03d", i))
		switch k := r.IntN(10); {
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
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(500+r.IntN(4000)), resource.DecimalSI)
		pods["default/"+p.Name] = p
	}
	return nodes, pods
}

// TestSimulatorMatchesExtender drives the simulator and the extender's
// cache with the same nodes and pod sequence: for every pod, the cache
// must find it fitting on exactly as many nodes (among those whose CPU
// fits, as kube-scheduler would pass them), rank the simulator's node
// highest (and keep it in FilterBest's answer), and give it the same cards
// there.
func TestSimulatorMatchesExtender(t *testing.T) {
	tests := []struct {
		name    string
		policy  string
		gpuOnly bool
		// cpuScale: millicores per "core" of node CPU; 1000 makes CPU
		// bind, 1000000 makes it never bind.
		cpuScale int64
		// constrained: pods choose cards by model and UUID, a card is
		// cordoned (see equivalenceCluster).
		constrained bool
	}{
		{"binpack", allocator.NameBinpack, false, 1000, false},
		{"spread", allocator.NameSpread, false, 1000, false},
		{"bestfit, CPU binding", allocator.NameBestFit, false, 1000, false},
		{"bestfit, GPU only", allocator.NameBestFit, true, 1000, false},
		{"fragaware, CPU binding", allocator.NameFragAware, false, 1000, false},
		{"fragaware, GPU only, CPU binding", allocator.NameFragAware, true, 1000, false},
		{"fragaware, with CPU that never binds", allocator.NameFragAware, false, 1000000, false},
		{"binpack, card constraints", allocator.NameBinpack, false, 1000, true},
		{"bestfit, card constraints", allocator.NameBestFit, false, 1000, true},
		{"fragaware, card constraints", allocator.NameFragAware, false, 1000, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= 3; seed++ {
				matchExtender(t, seed, tc.policy, tc.gpuOnly, tc.cpuScale, tc.constrained)
			}
		})
	}
}

func matchExtender(t *testing.T, seed uint64, policy string, gpuOnly bool, cpuScale int64, constrained bool) {
	t.Helper()
	nodes, pods := equivalenceCluster(seed, cpuScale, constrained)
	tr := &Trace{}
	reader, err := cache.New(cache.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		sn, err := kubeNode(reader, n)
		if err != nil {
			t.Fatal(err)
		}
		tr.Nodes = append(tr.Nodes, sn)
	}
	for _, p := range pods {
		sp, err := kubePod(p)
		if err != nil {
			t.Fatal(err)
		}
		tr.Pods = append(tr.Pods, sp)
	}
	res, err := Run(context.Background(), tr, Options{Policy: policy, Seed: seed, GPUOnly: gpuOnly, Record: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Pods != len(tr.Pods) {
		t.Fatalf("the simulator added %d clones; the test wants none", res.Pods-len(tr.Pods))
	}

	c, err := cache.New(cache.Config{Policy: policy, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	if err != nil {
		t.Fatal(err)
	}
	cpuFree := map[string]int64{}
	var names []string
	for _, n := range nodes {
		cpuFree[n.Name] = n.Status.Allocatable.Cpu().MilliValue()
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
	placed, constrainedPlaced := 0, 0
	for i, d := range res.Decisions {
		pod := pods[d.Pod]
		cpu := pod.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
		c.UpsertPod(pod) // the pending pod: the cache learns its shape
		var candidates []string
		for _, n := range names {
			if cpuFree[n] >= cpu {
				candidates = append(candidates, n)
			}
		}
		fit, _, err := c.Filter(cache.NewPodInfo(pod), candidates)
		if err != nil {
			t.Fatal(err)
		}
		if len(fit) != d.Candidates {
			t.Fatalf("seed %d, pod %d %s: the extender fits it on %d nodes %v, the simulator on %d", seed, i, d.Pod, len(fit), fit, d.Candidates)
		}
		if d.Node == "" {
			continue
		}
		scores, err := c.Score(cache.NewPodInfo(pod), fit)
		if err != nil {
			t.Fatal(err)
		}
		at := slices.Index(fit, d.Node)
		if at < 0 || scores[at] != allocator.MaxScore {
			t.Fatalf("seed %d, pod %d %s: the simulator chose %s; the extender scores %v for %v", seed, i, d.Pod, d.Node, scores, fit)
		}
		// The extender's default filter (--filter-best) keeps the
		// simulator's node among the ones it passes.
		best, _, err := c.FilterBest(cache.NewPodInfo(pod), candidates)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(best, d.Node) {
			t.Fatalf("seed %d, pod %d %s: the simulator chose %s; the extender's filter passes only %v", seed, i, d.Pod, d.Node, best)
		}
		alloc, err := c.Assume(cache.NewPodInfo(pod), d.Node)
		if err != nil {
			t.Fatal(err)
		}
		var cards [][]int
		for _, ca := range alloc.Containers {
			var idx []int
			for _, dev := range ca.Devices {
				idx = append(idx, dev.Index)
			}
			cards = append(cards, idx)
		}
		// The same cards per container; the annotation lists them by index.
		var simCards [][]int
		for _, idx := range d.Cards {
			simCards = append(simCards, slices.Sorted(slices.Values(idx)))
		}
		if diff := cmp.Diff(simCards, cards); diff != "" {
			t.Fatalf("seed %d, pod %d %s on %s: cards (-simulator +extender):\n%s", seed, i, d.Pod, d.Node, diff)
		}
		c.FinishBinding(pod.UID)
		cpuFree[d.Node] -= cpu
		placed++
		if cache.NewPodInfo(pod).Constraints != nil {
			constrainedPlaced++
		}
	}
	if placed < len(res.Decisions)/3 {
		t.Errorf("seed %d: only %d of %d pods placed; the test exercises little", seed, placed, len(res.Decisions))
	}
	if constrained && constrainedPlaced < placed/4 {
		t.Errorf("seed %d: only %d of the %d pods placed choose their cards; the test exercises little", seed, constrainedPlaced, placed)
	}
}
