package cache

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache/internal/view"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/util"
)

func newCache(t *testing.T, clk *clocktesting.FakeClock) *Cache {
	t.Helper()
	c, err := New(Config{Policy: allocator.NameBinpack, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		checkHoles(t, c)
		checkPublished(t, c)
	})
	return c
}

// checkPublished fails unless what the readers see without the lock (the
// nodes' published copies and the policy's inputs) is the cache's state as
// it is now: every change published what it changed.
func checkPublished(t *testing.T, c *Cache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, ns := range c.nodes {
		got := c.view.Snap(name)
		if !ns.seen {
			if got != nil {
				t.Errorf("node %s is a placeholder but readers see a copy of it: %+v", name, got)
			}
			continue
		}
		want := ns.snap(c.pods)
		if diff := cmp.Diff(want, got, cmp.AllowUnexported(view.Snap{}, view.CardUser{})); diff != "" {
			t.Errorf("node %s as readers see it (-state +published):\n%s", name, diff)
		}
	}
	x := c.view.Index()
	for name := range x.All {
		if ns, ok := c.nodes[name]; (!ok || !ns.seen) && x.Lookup(name) != nil {
			t.Errorf("readers see node %s, which the cache does not have", name)
		}
	}
	want := &view.Inputs{DefaultPolicy: c.policy, Typical: c.workload.Typical(), Holes: c.holes, CPUPerUnit: c.workload.CPUPerUnit(),
		MaxMilliCPU: c.maxMilliCPU, MaxUnits: c.maxUnits, Restrictions: c.workload.Restrictions()}
	want.ModelCosts = allocator.ModelCosts(want.Restrictions, c.holes)
	if diff := cmp.Diff(want, c.view.Inputs(), cmp.AllowUnexported(view.Inputs{}), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("policy inputs as readers see them (-state +published):\n%s", diff)
	}
}

// checkHoles fails unless the holes the cache kept in step with its
// changes are those of its nodes' cards and free CPU as they are now.
func checkHoles(t *testing.T, c *Cache) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	want := allocator.NewHoles()
	for _, ns := range c.nodes {
		want.AddNode(&ns.node, 1)
		if ns.hostKnown && len(ns.node.Cards) > 0 {
			want.AddHost(ns.allocMilliCPU-ns.reqMilliCPU, 1)
		}
	}
	if diff := cmp.Diff(want, c.holes); diff != "" {
		t.Errorf("holes kept in step differ from the cards' (-recomputed +kept):\n%s", diff)
	}
}

// node returns a copy of node name's cards, taken under the cache's lock.
func (c *Cache) node(name string) (allocator.Node, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, ok := c.nodes[name]
	if !ok {
		return allocator.Node{}, false
	}
	n := ns.node
	n.Cards = slices.Clone(ns.node.Cards)
	return n, true
}

// used returns each card's Used on node name.
func used(t *testing.T, c *Cache, name string) []int64 {
	t.Helper()
	n, ok := c.node(name)
	if !ok {
		t.Fatalf("node %s unknown", name)
	}
	out := make([]int64, len(n.Cards))
	for i, card := range n.Cards {
		out[i] = card.Used
	}
	return out
}

func TestAssumeLifecycle(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := newCache(t, clk)
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16, 16).Obj()); err != nil {
		t.Fatal(err)
	}
	pod := util.MakePod("p").GPUMem(6).Obj()

	a, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(pod), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{6, 0}, used(t, c, "n1")); diff != "" {
		t.Errorf("after Assume (-want +got):\n%s", diff)
	}
	// A retried bind holds nothing more and returns the same cards.
	again, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(pod), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(a, again); diff != "" {
		t.Errorf("retried Assume (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{6, 0}, used(t, c, "n1")); diff != "" {
		t.Errorf("after retried Assume (-want +got):\n%s", diff)
	}
	// A pending event, annotated by someone else meanwhile, keeps our
	// assumption (and does not add the annotation's).
	annotated := util.MakePod("p").GPUMem(6).Allocation(a).Obj()
	c.UpsertPod(annotated)
	if diff := cmp.Diff([]int64{6, 0}, used(t, c, "n1")); diff != "" {
		t.Errorf("after annotation event (-want +got):\n%s", diff)
	}
	// Bound, and the informer shows it: it no longer expires.
	c.FinishBinding(pod.UID)
	c.UpsertPod(util.MakePod("p").GPUMem(6).Allocation(a).Node("n1").Obj())
	clk.Step(time.Hour)
	if got := c.Expire(); len(got) != 0 {
		t.Errorf("Expire() after FinishBinding and the bound event = %v, want none", got)
	}
	// Bound elsewhere: clear error.
	if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(pod), "n2"); !errors.Is(err, ErrBoundElsewhere) {
		t.Errorf("Assume on another node: err = %v, want ErrBoundElsewhere", err)
	}
	// Forget does not release a bound pod.
	c.Forget(pod.UID)
	if diff := cmp.Diff([]int64{6, 0}, used(t, c, "n1")); diff != "" {
		t.Errorf("after Forget of a bound pod (-want +got):\n%s", diff)
	}
	// The pod finishes: released.
	c.UpsertPod(util.MakePod("p").GPUMem(6).Allocation(a).Node("n1").Phase(corev1.PodSucceeded).Obj())
	if diff := cmp.Diff([]int64{0, 0}, used(t, c, "n1")); diff != "" {
		t.Errorf("after Succeeded (-want +got):\n%s", diff)
	}
}

func TestForgetAndExpire(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := newCache(t, clk)
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16).Obj()); err != nil {
		t.Fatal(err)
	}
	p1 := util.MakePod("p1").GPUMem(4).Obj()
	p2 := util.MakePod("p2").GPUMem(5).Obj()
	if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(p1), "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(p2), "n1"); err != nil {
		t.Fatal(err)
	}
	c.Forget(p1.UID)
	if diff := cmp.Diff([]int64{5}, used(t, c, "n1")); diff != "" {
		t.Errorf("after Forget (-want +got):\n%s", diff)
	}
	clk.Step(DefaultAssumeTTL - time.Second)
	if got := c.Expire(); len(got) != 0 {
		t.Errorf("Expire() before the deadline = %v", got)
	}
	clk.Step(2 * time.Second)
	if diff := cmp.Diff([]Expired{{Namespace: "default", Name: "p2", Node: "n1"}}, c.Expire()); diff != "" {
		t.Errorf("Expire() (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int64{0}, used(t, c, "n1")); diff != "" {
		t.Errorf("after Expire (-want +got):\n%s", diff)
	}
}

func TestAssumeReasons(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16, 16).Obj()); err != nil {
		t.Fatal(err)
	}
	pod := util.MakePod("big").GPUMem(20).Obj()
	_, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(pod), "n1")
	var fe *allocator.FitError
	if !errors.As(err, &fe) {
		t.Fatalf("Assume(20 on 16+16) err = %v, want FitError", err)
	}
	if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(pod), "nope"); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("Assume on unknown node: err = %v, want ErrUnknownNode", err)
	}
	worst := kubeinfo.NewPodInfo(pod)
	worst.Policy = "worstfit"
	if _, err := c.Assume(context.Background(), worst, "n1"); err == nil {
		t.Error("Assume with an unknown policy succeeded")
	}

	// A node the extender knows, without GPUs: the same reason as filter
	// gives, not "unknown".
	if err := c.SetNode(util.MakeNode("cpu").Obj()); err != nil {
		t.Fatal(err)
	}
	small := kubeinfo.NewPodInfo(util.MakePod("small").GPUMem(2).Obj())
	_, err = c.Assume(context.Background(), small, "cpu")
	if errors.Is(err, ErrUnknownNode) || !errors.As(err, &fe) || !strings.Contains(fe.Reason, "node reports no GPU memory") {
		t.Errorf("Assume on a node without GPUs: err = %v, want a FitError saying it reports no GPU memory", err)
	}
	// A node only named by a bound pod (its own event not in yet) is unknown.
	c.UpsertPod(util.MakePod("early").GPUMem(4).Node("later").Obj())
	if _, err := c.Assume(context.Background(), small, "later"); !errors.Is(err, ErrUnknownNode) {
		t.Errorf("Assume on a placeholder node: err = %v, want ErrUnknownNode", err)
	}
	if _, failed, _ := c.Filter(context.Background(), small, []string{"later"}); !strings.Contains(failed["later"], "unknown") {
		t.Errorf("Filter on a placeholder node: reason %q, want unknown", failed["later"])
	}
}

func TestUpsertPodStates(t *testing.T) {
	alloc := &gpushare.Allocation{Node: "n1", Unit: "GiB", Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 1, Units: 4}}},
	}}
	tests := []struct {
		name string
		pods []*corev1.Pod
		want []int64
		// wantUnattributed on n1
		wantUnattributed int64
	}{
		{
			name: "pending pod holds nothing",
			pods: []*corev1.Pod{util.MakePod("p").GPUMem(4).Obj()},
			want: []int64{0, 0},
		},
		{
			name: "bound with allocation",
			pods: []*corev1.Pod{util.MakePod("p").GPUMem(4).Allocation(alloc).Node("n1").Obj()},
			want: []int64{0, 4},
		},
		{
			// Our Binding writes the node and the annotation at once: this
			// annotation is someone else's (see TestAllocationAnnotationTrust).
			name: "annotated but unbound holds nothing",
			pods: []*corev1.Pod{util.MakePod("p").GPUMem(4).Allocation(alloc).Obj()},
			want: []int64{0, 0},
		},
		{
			name: "legacy pod with Aliyun's index annotation",
			pods: []*corev1.Pod{util.MakePod("p").GPUMem(4).GPUMem(3).Annotation(gpushare.AnnotationIndex, "0").Node("n1").Obj()},
			want: []int64{7, 0},
		},
		{
			name:             "bound by another scheduler, no annotation",
			pods:             []*corev1.Pod{util.MakePod("p").GPUMem(4).Node("n1").Obj()},
			want:             []int64{0, 0},
			wantUnattributed: 4,
		},
		{
			name: "repeated updates count once",
			pods: []*corev1.Pod{
				util.MakePod("p").GPUMem(4).Allocation(alloc).Node("n1").Obj(),
				util.MakePod("p").GPUMem(4).Allocation(alloc).Node("n1").Obj(),
				util.MakePod("p").GPUMem(4).Allocation(alloc).Node("n1").Phase(corev1.PodRunning).Obj(),
			},
			want: []int64{0, 4},
		},
		{
			name: "failed pod releases",
			pods: []*corev1.Pod{
				util.MakePod("p").GPUMem(4).Allocation(alloc).Node("n1").Obj(),
				util.MakePod("p").GPUMem(4).Allocation(alloc).Node("n1").Phase(corev1.PodFailed).Obj(),
			},
			want: []int64{0, 0},
		},
		{
			name: "corrupt annotation is treated as absent",
			pods: []*corev1.Pod{util.MakePod("p").GPUMem(4).Annotation(gpushare.AnnotationAllocation, "{not json").Node("n1").Obj()},
			want: []int64{0, 0}, wantUnattributed: 4,
		},
		{
			name: "pod without gpu-mem is ignored",
			pods: []*corev1.Pod{util.MakePod("p").Container("x").Node("n1").Obj()},
			want: []int64{0, 0},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
			// Pods may arrive before their node.
			for _, p := range tc.pods {
				c.UpsertPod(p)
			}
			if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16, 16).Obj()); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, used(t, c, "n1")); diff != "" {
				t.Errorf("Used (-want +got):\n%s", diff)
			}
			views, _ := c.Inspect("n1")
			var un int64
			for _, p := range views[0].Unattributed {
				un += p.Units
			}
			if un != tc.wantUnattributed {
				t.Errorf("unattributed = %d, want %d", un, tc.wantUnattributed)
			}
		})
	}
}

func TestNodeCapacityChange(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	alloc := &gpushare.Allocation{Node: "n1", Unit: "GiB", Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 1, Units: 4}}},
	}}
	c.UpsertPod(util.MakePod("p").GPUMem(4).Allocation(alloc).Node("n1").Obj())
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16, 16).Obj()); err != nil {
		t.Fatal(err)
	}
	// Card 1 disappears: its usage is reported as missing, not lost.
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16).Obj()); err != nil {
		t.Fatal(err)
	}
	v, _ := c.Inspect("n1")
	if v[0].MissingUnits != 4 || v[0].Used != 0 {
		t.Errorf("after shrink: used %d missing %d, want 0 and 4", v[0].Used, v[0].MissingUnits)
	}
	// It comes back, now unhealthy: usage returns to it, no new pod fits there.
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16, 16).Unhealthy(1).Obj()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{0, 4}, used(t, c, "n1")); diff != "" {
		t.Errorf("after regrow (-want +got):\n%s", diff)
	}
	fit, failed, _ := c.Filter(context.Background(), &kubeinfo.PodInfo{Demand: gpushare.Demand{{Name: "c", Units: 14, Cards: 1}}}, []string{"n1"})
	if len(fit) != 1 {
		t.Errorf("14 GiB should fit on the healthy card: failed %v", failed)
	}
	_, failed, _ = c.Filter(context.Background(), &kubeinfo.PodInfo{Demand: gpushare.Demand{{Name: "c", Units: 14, Cards: 2}}}, []string{"n1"})
	if diff := cmp.Diff(map[string]string{"n1": "container c needs 14 GiB on each of 2 GPUs; 1 of 1 healthy GPUs have that much free"}, failed); diff != "" {
		t.Errorf("Filter reasons (-want +got):\n%s", diff)
	}
}

func TestCapacityFallbackAndBadInventory(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	n := util.MakeNode("n1").Capacity(50, 3).Obj()
	if err := c.SetNode(n); err != nil {
		t.Fatal(err)
	}
	v, _ := c.Inspect("n1")
	if v[0].Source != inspectapi.SourceCapacity || v[0].Total != 48 || len(v[0].Cards) != 3 {
		t.Errorf("fallback view = %+v, want 3 cards of 16 from capacity", v[0])
	}
	n.Annotations = map[string]string{gpushare.AnnotationInventory: `{"unit":"TiB","devices":[]}`}
	if err := c.SetNode(n); err == nil {
		t.Error("SetNode with a bad inventory returned no error")
	}
	v, _ = c.Inspect("n1")
	if v[0].Source != inspectapi.SourceCapacity || v[0].InventoryError == "" {
		t.Errorf("bad inventory view = %+v, want capacity fallback with the error", v[0])
	}
	_, failed, _ := c.Filter(context.Background(), &kubeinfo.PodInfo{Demand: gpushare.Demand{{Name: "c", Units: 1, Cards: 1}}}, []string{"n1", "gone"})
	if failed["gone"] == "" {
		t.Errorf("unknown node has no reason: %v", failed)
	}
}

func TestScoreRanksByPolicy(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	for _, n := range []*corev1.Node{
		util.MakeNode("empty").Cards("T4", 16).Obj(),
		util.MakeNode("half").Cards("T4", 16).Obj(),
		util.MakeNode("full").Cards("T4", 16).Obj(),
	} {
		if err := c.SetNode(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []struct {
		name  string
		node  string
		units int64
	}{{"a", "half", 8}, {"b", "full", 14}} {
		pod := util.MakePod(p.name).GPUMem(p.units).Obj()
		if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(pod), p.node); err != nil {
			t.Fatal(err)
		}
	}
	d := gpushare.Demand{{Name: "c", Units: 4, Cards: 1}}
	nodes := []string{"empty", "half", "full"}
	for _, tc := range []struct {
		policy string
		want   []int64
	}{
		{allocator.NameBinpack, []int64{0, 10, 0}}, // full cannot take 4
		{allocator.NameSpread, []int64{10, 0, 0}},
	} {
		got, err := c.Score(context.Background(), &kubeinfo.PodInfo{Demand: d, Policy: tc.policy}, nodes)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("Score(%s) (-want +got):\n%s", tc.policy, diff)
		}
	}
}

// TestFailedBindAnnotationRemovedReleases follows a bind whose annotation
// was written before its Binding (an older extender's protocol), whose
// Binding failed, and whose annotation was then removed: the informer
// events must leave nothing held, in either order against Forget.
func TestFailedBindAnnotationRemovedReleases(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16).Obj()); err != nil {
		t.Fatal(err)
	}
	pod := util.MakePod("p").GPUMem(6).Obj()
	a, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(pod), "n1")
	if err != nil {
		t.Fatal(err)
	}
	// A stale pending event (from before the bind) keeps the assumption.
	c.UpsertPod(util.MakePod("p").GPUMem(6).Obj())
	if diff := cmp.Diff([]int64{6}, used(t, c, "n1")); diff != "" {
		t.Fatalf("stale pending event released the assumption (-want +got):\n%s", diff)
	}
	c.Forget(pod.UID)
	c.UpsertPod(util.MakePod("p").GPUMem(6).Allocation(a).Obj()) // the annotation, seen late
	c.UpsertPod(util.MakePod("p").GPUMem(6).Obj())               // its removal
	if diff := cmp.Diff([]int64{0}, used(t, c, "n1")); diff != "" {
		t.Errorf("after the failed bind's events (-want +got):\n%s", diff)
	}
}

// TestRepairedAllocationIsRecharged follows the device plugin correcting a
// bound pod's allocation to the card kubelet actually gave it.
func TestRepairedAllocationIsRecharged(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16, 16).Obj()); err != nil {
		t.Fatal(err)
	}
	pod := util.MakePod("p").GPUMem(6).Obj()
	a, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(pod), "n1")
	if err != nil {
		t.Fatal(err)
	}
	c.FinishBinding(pod.UID)
	c.UpsertPod(util.MakePod("p").GPUMem(6).Allocation(a).Node("n1").Obj())
	if diff := cmp.Diff([]int64{6, 0}, used(t, c, "n1")); diff != "" {
		t.Fatalf("bound (-want +got):\n%s", diff)
	}
	repaired := &gpushare.Allocation{Node: "n1", Unit: "GiB", Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 1, UUID: "GPU-n1-1", Units: 6}}},
	}}
	c.UpsertPod(util.MakePod("p").GPUMem(6).Allocation(repaired).Node("n1").Obj())
	if diff := cmp.Diff([]int64{0, 6}, used(t, c, "n1")); diff != "" {
		t.Errorf("after repair (-want +got):\n%s", diff)
	}
}

// TestFGDLearnsTheWorkload checks that the extender feeds fgd, not only
// fragaware, with the typical requests: with none, fgd scores every node
// alike.
func TestFGDLearnsTheWorkload(t *testing.T) {
	c, err := New(Config{Policy: allocator.NameFGD, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*corev1.Node{util.MakeNode("a").Cards("T4", 16).Obj(), util.MakeNode("b").Cards("T4", 16).Obj()} {
		if err := c.SetNode(n); err != nil {
			t.Fatal(err)
		}
	}
	// Node a has 10 free, b 16; the workload is all 8 GiB pods.
	busy := util.MakePod("busy").GPUMem(6).Obj()
	if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(busy), "a"); err != nil {
		t.Fatal(err)
	}
	// The workload is learned from placed pods (here on a node not
	// scored), never from pending ones.
	for i := range 5 {
		c.UpsertPod(util.MakePod(fmt.Sprintf("w%d", i)).GPUMem(8).Node("elsewhere").Obj())
	}
	// A 4 GiB pod on a leaves 6, which no 8 GiB pod can use; on b it
	// leaves 12. fgd must prefer b; without the workload it sees no
	// difference.
	got, err := c.Score(context.Background(), &kubeinfo.PodInfo{Demand: gpushare.Demand{{Name: "c", Units: 4, Cards: 1}}}, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if got[1] <= got[0] {
		t.Errorf("fgd scores %v, want node b above node a", got)
	}
}

// hostUsed returns the CPU (millicores) and memory (MiB) the cache counts
// as requested on node name.
func hostUsed(t *testing.T, c *Cache, name string) [2]int64 {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, ok := c.nodes[name]
	if !ok {
		return [2]int64{}
	}
	return [2]int64{ns.reqMilliCPU, ns.reqMemMiB}
}

func TestHostRequestsFollowPods(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := newCache(t, clk)
	if err := c.SetNode(util.MakeNode("n1").Host("32", "128Gi").Cards("T4", 16, 16).Obj()); err != nil {
		t.Fatal(err)
	}
	web := util.MakePod("web").Requests("500m", "1Gi")
	gpu := util.MakePod("gpu").GPUMem(4).Requests("2", "4Gi")
	other := util.MakePod("other").GPUMem(4).Requests("1", "1Gi")
	steps := []struct {
		name string
		do   func()
		want [2]int64
	}{
		{"pending CPU pod holds nothing", func() { c.UpsertPod(web.Obj()) }, [2]int64{0, 0}},
		{"bound CPU pod", func() { c.UpsertPod(web.Node("n1").Obj()) }, [2]int64{500, 1024}},
		{"assumed GPU pod", func() {
			if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(gpu.Obj()), "n1"); err != nil {
				t.Fatal(err)
			}
		}, [2]int64{2500, 5120}},
		{"its pending event keeps the assumption", func() { c.UpsertPod(gpu.Obj()) }, [2]int64{2500, 5120}},
		{"forgotten", func() { c.Forget(gpu.Obj().UID) }, [2]int64{500, 1024}},
		{"assumed again, then bound", func() {
			a, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(gpu.Obj()), "n1")
			if err != nil {
				t.Fatal(err)
			}
			c.FinishBinding(gpu.Obj().UID)
			c.UpsertPod(gpu.Allocation(a).Node("n1").Obj())
		}, [2]int64{2500, 5120}},
		{"a bound pod does not expire", func() { clk.Step(time.Hour); c.Expire() }, [2]int64{2500, 5120}},
		{"assumed and expired", func() {
			if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(other.Obj()), "n1"); err != nil {
				t.Fatal(err)
			}
			clk.Step(time.Hour)
			c.Expire()
		}, [2]int64{2500, 5120}},
		{"CPU pod finished", func() { c.UpsertPod(web.Phase(corev1.PodSucceeded).Obj()) }, [2]int64{2000, 4096}},
		{"GPU pod deleted", func() { c.DeletePod(gpu.Obj().UID) }, [2]int64{0, 0}},
	}
	for _, s := range steps {
		s.do()
		if diff := cmp.Diff(s.want, hostUsed(t, c, "n1")); diff != "" {
			t.Fatalf("%s: [millicores, MiB] (-want +got):\n%s", s.name, diff)
		}
	}
}

func TestNodeDeletedAndBackKeepsItsPods(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	node := util.MakeNode("n1").Host("32", "128Gi").Cards("T4", 16, 16).Obj()
	if err := c.SetNode(node); err != nil {
		t.Fatal(err)
	}
	pod := util.MakePod("p").GPUMem(6).Requests("4", "1Gi").Obj()
	if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(pod), "n1"); err != nil {
		t.Fatal(err)
	}
	c.FinishBinding(pod.UID)
	c.DeleteNode("n1")
	if err := c.SetNode(node); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{6, 0}, used(t, c, "n1")); diff != "" {
		t.Errorf("cards after the node came back (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([2]int64{4000, 1024}, hostUsed(t, c, "n1")); diff != "" {
		t.Errorf("host after the node came back (-want +got):\n%s", diff)
	}
}

// TestFragAwareWeighsCPU is the package doc's worked example through the
// cache: two nodes with equal cards, one short of CPU; the GPU-only score
// cannot tell them apart, the host-aware one sends the CPU-heavy pod where
// CPU is plentiful.
func TestFragAwareWeighsCPU(t *testing.T) {
	c, err := New(Config{Policy: allocator.NameFragAware, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*corev1.Node{
		util.MakeNode("a").Host("20", "256Gi").Cards("T4", 16, 16).Obj(),
		util.MakeNode("b").Host("96", "256Gi").Cards("T4", 16, 16).Obj(),
	} {
		if err := c.SetNode(n); err != nil {
			t.Fatal(err)
		}
	}
	// The workload: half 8 GiB pods with 4 cores, half 16 GiB with 8.
	for i := range 10 {
		w := util.MakePod(fmt.Sprintf("w%d", i))
		if i%2 == 0 {
			w.GPUMem(8).Requests("4", "1Gi")
		} else {
			w.GPUMem(16).Requests("8", "1Gi")
		}
		c.UpsertPod(w.Obj())
	}
	pod := kubeinfo.NewPodInfo(util.MakePod("p").GPUMem(8).Requests("16", "1Gi").Obj())
	got, err := c.Score(context.Background(), pod, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{0, allocator.MaxScore}, got); diff != "" {
		t.Errorf("scores for [a b] (-want +got):\n%s", diff)
	}
}

func TestFilterBest(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0))) // binpack
	for _, n := range []*corev1.Node{
		util.MakeNode("busy").Cards("T4", 16).Obj(),
		util.MakeNode("empty-1").Cards("T4", 16).Obj(),
		util.MakeNode("empty-2").Cards("T4", 16).Obj(),
		util.MakeNode("small").Cards("T4", 2).Obj(),
	} {
		if err := c.SetNode(n); err != nil {
			t.Fatal(err)
		}
	}
	nodes := []string{"busy", "empty-1", "empty-2", "small"}
	pod := kubeinfo.NewPodInfo(util.MakePod("p").GPUMem(4).Obj())
	tests := []struct {
		name       string
		setup      func()
		wantBest   []string
		wantFailed []string
	}{
		{"all empty: every node that fits ties", func() {}, []string{"busy", "empty-1", "empty-2"}, []string{"small"}},
		{"binpack: only the fullest node", func() {
			if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(util.MakePod("held").GPUMem(8).Obj()), "busy"); err != nil {
				t.Fatal(err)
			}
		}, []string{"busy"}, []string{"small"}},
	}
	for _, tc := range tests {
		tc.setup()
		best, failed, err := c.FilterBest(context.Background(), pod, nodes)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.wantBest, best); diff != "" {
			t.Errorf("%s: best (-want +got):\n%s", tc.name, diff)
		}
		if diff := cmp.Diff(tc.wantFailed, slices.Sorted(maps.Keys(failed))); diff != "" {
			t.Errorf("%s: failed (-want +got):\n%s", tc.name, diff)
		}
	}
}

// TestMaximaFollowNodeChanges checks the CPU and GPU maxima the host-aware
// scores scale by, as nodes grow, shrink and go.
func TestMaximaFollowNodeChanges(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	type maxima struct{ MilliCPU, Units int64 }
	get := func() maxima {
		c.mu.Lock()
		defer c.mu.Unlock()
		return maxima{c.maxMilliCPU, c.maxUnits}
	}
	steps := []struct {
		name string
		do   func() error
		want maxima
	}{
		{"add a", func() error { return c.SetNode(util.MakeNode("a").Host("16", "64Gi").Cards("A100", 80).Obj()) }, maxima{16000, 80}},
		{"add b", func() error { return c.SetNode(util.MakeNode("b").Host("8", "32Gi").Cards("T4", 16).Obj()) }, maxima{16000, 80}},
		{"add c", func() error { return c.SetNode(util.MakeNode("c").Host("4", "16Gi").Cards("T4", 16, 16).Obj()) }, maxima{16000, 80}},
		{"delete b (no maximum)", func() error { c.DeleteNode("b"); return nil }, maxima{16000, 80}},
		{"shrink a", func() error { return c.SetNode(util.MakeNode("a").Host("2", "64Gi").Cards("A100", 20).Obj()) }, maxima{4000, 32}},
		{"grow c", func() error { return c.SetNode(util.MakeNode("c").Host("6", "16Gi").Cards("T4", 16, 16).Obj()) }, maxima{6000, 32}},
		{"delete c (both maxima)", func() error { c.DeleteNode("c"); return nil }, maxima{2000, 20}},
		{"delete a", func() error { c.DeleteNode("a"); return nil }, maxima{0, 0}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if diff := cmp.Diff(s.want, get()); diff != "" {
			t.Errorf("after %s, maxima (-want +got):\n%s", s.name, diff)
		}
	}
}

// TestAllocationAnnotationTrust: an allocation annotation is charged only
// when this extender chose it or a bound pod carries it and it fits the
// pod's request and the node's cards (converted to the node's unit);
// otherwise the pod is charged by its request as if it had none, and
// Inspect says what was ignored and why.
func TestAllocationAnnotationTrust(t *testing.T) {
	share := func(idx int, uuid string, units int64) []gpushare.DeviceShare {
		return []gpushare.DeviceShare{{Index: idx, UUID: uuid, Units: units}}
	}
	alloc := func(node, unit string, containers ...gpushare.ContainerAllocation) *gpushare.Allocation {
		return &gpushare.Allocation{Node: node, Unit: unit, Containers: containers}
	}
	c0 := func(d []gpushare.DeviceShare) gpushare.ContainerAllocation {
		return gpushare.ContainerAllocation{Name: "c0", Devices: d}
	}
	tests := []struct {
		name             string
		pod              *corev1.Pod
		want             []int64
		wantUnattributed int64
		wantMissing      int64
		wantIgnored      string // substring of the reason; "" for none
	}{
		{
			name: "bound, fits request and card",
			pod:  util.MakePod("p").GPUMem(4).Allocation(alloc("n1", "GiB", c0(share(1, "GPU-n1-1", 4)))).Node("n1").Obj(),
			want: []int64{0, 4},
		},
		{
			name:        "pending pod carrying an annotation (copied YAML) holds nothing",
			pod:         util.MakePod("p").GPUMem(4).Allocation(alloc("n1", "GiB", c0(share(0, "GPU-n1-0", 16)))).Obj(),
			want:        []int64{0, 0},
			wantIgnored: "not bound",
		},
		{
			name:             "bound, more units than the pod asks",
			pod:              util.MakePod("p").GPUMem(4).Allocation(alloc("n1", "GiB", c0(share(0, "GPU-n1-0", 16)))).Node("n1").Obj(),
			want:             []int64{0, 0},
			wantUnattributed: 4,
			wantIgnored:      "asks 4",
		},
		{
			// As for a node that lost a card under running pods: on no
			// card, shown as missing.
			name:        "bound, names a card the node lacks",
			pod:         util.MakePod("p").GPUMem(4).Allocation(alloc("n1", "GiB", c0(share(7, "", 4)))).Node("n1").Obj(),
			want:        []int64{0, 0},
			wantMissing: 4,
		},
		{
			name:             "bound, names a card by another UUID",
			pod:              util.MakePod("p").GPUMem(4).Allocation(alloc("n1", "GiB", c0(share(1, "GPU-elsewhere", 4)))).Node("n1").Obj(),
			want:             []int64{0, 0},
			wantUnattributed: 4,
			wantIgnored:      "GPU-elsewhere",
		},
		{
			name:             "bound, more than the card holds",
			pod:              util.MakePod("p").GPUMem(40).Allocation(alloc("n1", "GiB", c0(share(0, "GPU-n1-0", 40)))).Node("n1").Obj(),
			want:             []int64{0, 0},
			wantUnattributed: 40,
			wantIgnored:      "16",
		},
		{
			name:             "bound, allocation for another node",
			pod:              util.MakePod("p").GPUMem(4).Allocation(alloc("n2", "GiB", c0(share(1, "", 4)))).Node("n1").Obj(),
			want:             []int64{0, 0},
			wantUnattributed: 4,
			wantIgnored:      "n2",
		},
		{
			name:             "bound, containers differ from the spec",
			pod:              util.MakePod("p").GPUMem(4).Allocation(alloc("n1", "GiB", gpushare.ContainerAllocation{Name: "other", Devices: share(1, "", 4)})).Node("n1").Obj(),
			want:             []int64{0, 0},
			wantUnattributed: 4,
			wantIgnored:      "other",
		},
		{
			name: "bound, in MiB on a GiB node: converted",
			pod:  util.MakePod("p").GPUMem(4).Allocation(alloc("n1", "MiB", c0(share(1, "GPU-n1-1", 4096)))).Node("n1").Obj(),
			want: []int64{0, 4},
		},
		{
			name:             "bound, in MiB on a GiB node, not the request once converted",
			pod:              util.MakePod("p").GPUMem(4).Allocation(alloc("n1", "MiB", c0(share(1, "GPU-n1-1", 4)))).Node("n1").Obj(),
			want:             []int64{0, 0},
			wantUnattributed: 4,
			wantIgnored:      "MiB",
		},
		{
			name:             "bound, in an unknown unit",
			pod:              util.MakePod("p").GPUMem(4).Allocation(alloc("n1", "TiB", c0(share(1, "GPU-n1-1", 4)))).Node("n1").Obj(),
			want:             []int64{0, 0},
			wantUnattributed: 4,
			wantIgnored:      "TiB",
		},
		{
			name:        "ignored allocation, Aliyun's index: charged there",
			pod:         util.MakePod("p").GPUMem(4).Allocation(alloc("n1", "GiB", c0(share(0, "", 9)))).Annotation(gpushare.AnnotationIndex, "1").Node("n1").Obj(),
			want:        []int64{0, 4},
			wantIgnored: "asks 4",
		},
	}
	for _, tc := range tests {
		for _, nodeFirst := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/node first %v", tc.name, nodeFirst), func(t *testing.T) {
				c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
				node := util.MakeNode("n1").Cards("T4", 16, 16).Obj()
				if nodeFirst {
					if err := c.SetNode(node); err != nil {
						t.Fatal(err)
					}
				}
				c.UpsertPod(tc.pod)
				if !nodeFirst {
					if err := c.SetNode(node); err != nil {
						t.Fatal(err)
					}
				}
				if diff := cmp.Diff(tc.want, used(t, c, "n1")); diff != "" {
					t.Errorf("Used (-want +got):\n%s", diff)
				}
				views, _ := c.Inspect("n1")
				var un int64
				for _, p := range views[0].Unattributed {
					un += p.Units
				}
				if un != tc.wantUnattributed {
					t.Errorf("unattributed = %d, want %d", un, tc.wantUnattributed)
				}
				if views[0].MissingUnits != tc.wantMissing {
					t.Errorf("missing = %d, want %d", views[0].MissingUnits, tc.wantMissing)
				}
				var reasons []string
				for _, ig := range views[0].Ignored {
					reasons = append(reasons, ig.Reason)
				}
				switch {
				case tc.wantIgnored == "" && len(reasons) > 0:
					t.Errorf("ignored %q, want nothing ignored", reasons)
				case tc.wantIgnored != "" && (len(reasons) != 1 || !strings.Contains(reasons[0], tc.wantIgnored)):
					t.Errorf("ignored %q, want one reason containing %q", reasons, tc.wantIgnored)
				}
			})
		}
	}
}

// TestAssumeIgnoresAPendingPodsAnnotation: bind chooses cards for a pod
// that arrived carrying an allocation annotation; it does not return or
// hold the annotation's.
func TestAssumeIgnoresAPendingPodsAnnotation(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16, 16).Obj()); err != nil {
		t.Fatal(err)
	}
	bogus := &gpushare.Allocation{Node: "n1", Unit: "GiB", Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, Units: 16}}}}}
	pod := util.MakePod("p").GPUMem(4).Allocation(bogus).Obj()
	c.UpsertPod(pod)
	a, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(pod), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Total(); got != 4 {
		t.Errorf("Assume returned an allocation of %d units, want the pod's 4", got)
	}
	if diff := cmp.Diff(int64(4), sum(used(t, c, "n1"))); diff != "" {
		t.Errorf("units held (-want +got):\n%s", diff)
	}
}

func sum(s []int64) int64 {
	var t int64
	for _, v := range s {
		t += v
	}
	return t
}

// TestBoundButNeverSeenExpires: a pod created, bound (our Binding, made
// after reading the pod from the API) and deleted within one watch gap is
// never delivered by the informer, so no delete comes either; its cards,
// CPU and memory are released at its deadline. One the informer confirms
// stays.
func TestBoundButNeverSeenExpires(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := newCache(t, clk)
	if err := c.SetNode(util.MakeNode("n1").Host("32", "64Gi").Cards("T4", 16, 16).Obj()); err != nil {
		t.Fatal(err)
	}
	ghost := util.MakePod("ghost").GPUMem(6).Requests("2", "2Gi").Obj()
	seen := util.MakePod("seen").GPUMem(4).Requests("1", "1Gi").Obj()
	for _, p := range []*corev1.Pod{ghost, seen} {
		a, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(p), "n1")
		if err != nil {
			t.Fatal(err)
		}
		c.FinishBinding(p.UID)
		if p == seen {
			c.UpsertPod(util.MakePod("seen").GPUMem(4).Requests("1", "1Gi").Allocation(a).Node("n1").Obj())
		}
	}
	clk.Step(DefaultAssumeTTL - time.Second)
	if got := c.Expire(); len(got) != 0 {
		t.Fatalf("Expire() before the deadline = %v", got)
	}
	clk.Step(2 * time.Second)
	if diff := cmp.Diff([]Expired{{Namespace: "default", Name: "ghost", Node: "n1", Bound: true}}, c.Expire()); diff != "" {
		t.Errorf("Expire() (-want +got):\n%s", diff)
	}
	if got := sum(used(t, c, "n1")); got != 4 {
		t.Errorf("%d units held after expiry, want the confirmed pod's 4", got)
	}
	if diff := cmp.Diff([2]int64{1000, 1024}, hostUsed(t, c, "n1")); diff != "" {
		t.Errorf("CPU and memory held [millicores, MiB] (-want +got):\n%s", diff)
	}
}

// TestAssumeKeepsABindInFlight: while a bind to one node has not ended (or
// ended with an unknown outcome, see extender.Binder), a bind of the same
// pod to another node must not release its cards: that Binding may still
// be made.
func TestAssumeKeepsABindInFlight(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	for _, n := range []string{"n1", "n2"} {
		if err := c.SetNode(util.MakeNode(n).Cards("T4", 16).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	pod := kubeinfo.NewPodInfo(util.MakePod("p").GPUMem(6).Obj())
	if _, err := c.Assume(context.Background(), pod, "n1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Assume(context.Background(), pod, "n2"); !errors.Is(err, ErrBindInFlight) {
		t.Fatalf("Assume on n2 during a bind to n1: %v, want ErrBindInFlight", err)
	}
	if diff := cmp.Diff([]int64{6}, used(t, c, "n1")); diff != "" {
		t.Errorf("n1 (-want +got):\n%s", diff)
	}
	c.Forget(pod.UID) // that bind failed: no Binding
	if _, err := c.Assume(context.Background(), pod, "n2"); err != nil {
		t.Fatalf("Assume on n2 after the bind to n1 failed: %v", err)
	}
	if diff := cmp.Diff([]int64{0}, used(t, c, "n1")); diff != "" {
		t.Errorf("n1 after moving (-want +got):\n%s", diff)
	}
}

// TestCPUPressureLearnsPodsOnGPUNodes: the workload's CPU per unit of GPU
// memory counts the pods without GPU memory bound to nodes with cards, once
// each, and no others; the policy the cache builds gets the pressure from
// it and from the free CPU the holes keep.
func TestCPUPressureLearnsPodsOnGPUNodes(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	for _, n := range []*corev1.Node{
		util.MakeNode("gpu").Host("32", "128Gi").Cards("T4", 16, 16).Obj(),
		util.MakeNode("cpu").Host("64", "256Gi").Obj(),
	} {
		if err := c.SetNode(n); err != nil {
			t.Fatal(err)
		}
	}
	const d = 0.999 // allocator's workloadDecay
	gpuPod := util.MakePod("train").GPUMem(4).Requests("2", "4Gi")
	web := util.MakePod("web").Requests("1", "1Gi")
	steps := []struct {
		name string
		do   func()
		want float64 // millicores per GiB
	}{
		{"a pending GPU pod is not counted: anyone may create pods that never schedule", func() { c.UpsertPod(gpuPod.Obj()) }, 0},
		{"bound, it is: 2 cores for 4 GiB", func() { c.UpsertPod(gpuPod.Node("gpu").Obj()) }, 500},
		{"a pending pod without GPU memory is not counted", func() { c.UpsertPod(web.Obj()) }, 500},
		{"bound to the GPU node, it is", func() { c.UpsertPod(web.Node("gpu").Obj()) }, (2000*d + 1000) / (4 * d)},
		{"once, whatever its updates", func() { c.UpsertPod(web.Node("gpu").Obj()) }, (2000*d + 1000) / (4 * d)},
		{"one on a node without cards is not", func() {
			c.UpsertPod(util.MakePod("batch").Requests("8", "1Gi").Node("cpu").Obj())
		}, (2000*d + 1000) / (4 * d)},
	}
	for _, s := range steps {
		s.do()
		c.mu.Lock()
		got := c.workload.CPUPerUnit()
		c.mu.Unlock()
		if diff := cmp.Diff(s.want, got, cmpopts.EquateApprox(1e-12, 0)); diff != "" {
			t.Fatalf("%s: CPUPerUnit (-want +got):\n%s", s.name, diff)
		}
	}
	// The GPU node: 32 cores less the bound pods' 2 and 1 free beside 32
	// GiB (the GPU pod, without an allocation annotation, is charged
	// unattributed, not on a card); the CPU node has no cards and does
	// not count.
	p, err := c.view.Inputs().Policy(allocator.NameFragAware, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := (2000*d + 1000) / (4 * d) * 32 / 29000
	if diff := cmp.Diff(want, p.(*allocator.FragAware).Pressure(), cmpopts.EquateApprox(1e-12, 0)); diff != "" {
		t.Errorf("pressure (-want +got):\n%s", diff)
	}
}

// cardsOf is node's cards as Inspect shows them: index -> "used/total".
func cardsOf(t *testing.T, c *Cache, node string) (source string, cards map[int][2]int64) {
	t.Helper()
	views, ok := c.Inspect(node)
	if !ok || len(views) != 1 {
		return "", nil
	}
	cards = map[int][2]int64{}
	for _, cv := range views[0].Cards {
		cards[cv.Index] = [2]int64{cv.Used, cv.Total}
	}
	return views[0].Source, cards
}

// TestCPUPressureLearnsClaimPods: on a DRA node, a pod marked
// gpushare.io/dra-claim is learnt through its claim, as a GPU pod with the
// pod's CPU (the simulator's DRA replay learns it so), never as a pod
// asking no GPU memory; an unmarked pod there is one.
func TestCPUPressureLearnsClaimPods(t *testing.T) {
	c := newCache(t, nil)
	if err := c.SetDRANode("dra", gpushare.UnitGiB, []allocator.Card{{Index: 0, Total: 16, Healthy: true}}); err != nil {
		t.Fatal(err)
	}
	if err := c.SetNode(util.MakeNode("dra").Host("32", "128Gi").Obj()); err != nil {
		t.Fatal(err)
	}
	marked := util.MakePod("train").Requests("2", "4Gi").Node("dra").Obj()
	marked.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpushare.ResourceDRAClaim: resource.MustParse("1")}
	const d = 0.999 // allocator's workloadDecay
	for _, s := range []struct {
		name string
		do   func()
		want float64 // millicores per GiB
	}{
		{"the marked pod bound: not a pod without GPU memory", func() { c.UpsertPod(marked) }, 0},
		{"its claim: 2 cores for 4 GiB", func() {
			c.UpsertClaim(&kubeinfo.PodInfo{Name: "train-gpu", Namespace: "default", UID: "claim", NodeName: "dra", Phase: corev1.PodRunning, LegacyIndex: -1,
				MilliCPU: 2000, MemoryMiB: 4096, Demand: gpushare.Demand{{Name: "d", Units: 4, Cards: 1}},
				Allocation: &gpushare.Allocation{Node: "dra", Unit: "GiB", Containers: []gpushare.ContainerAllocation{{Name: "d", Devices: []gpushare.DeviceShare{{Index: 0, Units: 4}}}}}})
		}, 500},
		{"an unmarked pod there: one without GPU memory", func() { c.UpsertPod(util.MakePod("web").Requests("1", "1Gi").Node("dra").Obj()) }, (2000*d + 1000) / (4 * d)},
	} {
		s.do()
		c.mu.Lock()
		got := c.workload.CPUPerUnit()
		c.mu.Unlock()
		if diff := cmp.Diff(s.want, got, cmpopts.EquateApprox(1e-12, 0)); diff != "" {
			t.Fatalf("%s: CPUPerUnit (-want +got):\n%s", s.name, diff)
		}
	}
	if _, cards := cardsOf(t, c, "dra"); cards[0] != [2]int64{4, 16} {
		t.Errorf("the claim holds %v of the DRA card, want 4 of 16 GiB", cards[0])
	}
}

// TestPendingPodsDoNotSteer: pods that never schedule (anyone may create
// them, in any namespace) teach the workload model nothing: 200 pending
// pods asking 1 GiB and 64 cores each leave fragaware's typical requests
// and CPU pressure where the placed pods put them.
func TestPendingPodsDoNotSteer(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	if err := c.SetNode(util.MakeNode("gpu").Host("64", "256Gi").Cards("T4", 16, 16, 16, 16).Obj()); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		c.UpsertPod(util.MakePod(fmt.Sprintf("placed-%d", i)).GPUMem(8).Requests("4", "16Gi").Node("gpu").Obj())
	}
	policy := func() *allocator.FragAware {
		p, err := c.view.Inputs().Policy(allocator.NameFragAware, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p.(*allocator.FragAware)
	}
	before, typical := policy().Pressure(), c.view.Inputs().Typical
	for i := range 200 {
		c.UpsertPod(util.MakePod(fmt.Sprintf("never-%d", i)).Namespace(fmt.Sprintf("tenant-%d", i%7)).GPUMem(1).Requests("64", "1Gi").Obj())
	}
	if after := policy().Pressure(); after != before {
		t.Errorf("CPU pressure went from %g to %g with 200 pending pods", before, after)
	}
	if diff := cmp.Diff(typical, c.view.Inputs().Typical); diff != "" {
		t.Errorf("typical requests changed with 200 pending pods (-before +after):\n%s", diff)
	}
}

// TestFilterPinsAnUnsettledBind: while the pod's own assumption stands (a
// bind that has not ended, or ended with an unknown outcome), Filter and
// FilterBest offer kube-scheduler only that node, where a second bind
// settles the first; once the Binding is made, forgotten or expired, or
// when kube-scheduler does not offer the node, they answer as usual.
func TestFilterPinsAnUnsettledBind(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := newCache(t, clk)
	for _, n := range []string{"n1", "n2", "n3"} {
		if err := c.SetNode(util.MakeNode(n).Cards("T4", 16).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	raw := util.MakePod("p").GPUMem(10).Obj() // 10 of 16 GiB: a second copy of it never fits beside the first
	pod := kubeinfo.NewPodInfo(raw)
	all := []string{"n1", "n2", "n3"}
	assume := func() {
		t.Helper()
		if _, err := c.Assume(context.Background(), pod, "n2"); err != nil {
			t.Fatal(err)
		}
	}
	reason := "the pod's bind to node n2 has not ended or its outcome is unknown; it is tried on n2 again"
	pinned := map[string]string{"n1": reason, "n3": reason}
	usual := map[string]string{}
	tests := []struct {
		name       string
		step       func()
		nodes      []string
		wantFit    []string
		wantFailed map[string]string
	}{
		{"no assumption", func() {}, all, all, usual},
		{"bind in flight: its node alone", assume, all, []string{"n2"}, pinned},
		{"its node not offered: the usual answer", func() {}, []string{"n1", "n3"}, []string{"n1", "n3"}, usual},
		{"bind failed, no Binding (Forget)", func() { c.Forget(pod.UID) }, all, all, usual},
		{"bind in flight again", assume, all, []string{"n2"}, pinned},
		{"assumption expired", func() {
			clk.Step(DefaultAssumeTTL + time.Second)
			if got := len(c.Expire()); got != 1 {
				t.Fatalf("Expire released %d allocations, want 1", got)
			}
		}, all, all, usual},
		{"bind in flight once more", assume, all, []string{"n2"}, pinned},
		{"Binding made (FinishBinding): n2 holds the pod", func() { c.FinishBinding(pod.UID) }, all, []string{"n1", "n3"},
			map[string]string{"n2": "container c0 needs 10 GiB on one GPU; largest free GPU has 6 of 16 GiB"}},
	}
	for _, tc := range tests {
		tc.step()
		fit, failed, err := c.Filter(context.Background(), pod, tc.nodes)
		if err != nil {
			t.Fatalf("%s: Filter: %v", tc.name, err)
		}
		best, bestFailed, err := c.FilterBest(context.Background(), pod, tc.nodes)
		if err != nil {
			t.Fatalf("%s: FilterBest: %v", tc.name, err)
		}
		for verb, got := range map[string][]string{"Filter": fit, "FilterBest": best} {
			if diff := cmp.Diff(tc.wantFit, got); diff != "" {
				t.Errorf("%s: %s's nodes (-want +got):\n%s", tc.name, verb, diff)
			}
		}
		for verb, got := range map[string]map[string]string{"Filter": failed, "FilterBest": bestFailed} {
			if diff := cmp.Diff(tc.wantFailed, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("%s: %s's failed nodes (-want +got):\n%s", tc.name, verb, diff)
			}
		}
	}
}

// TestAssumeRefusesADeletedPod: a bind that read the pod just before its
// delete reached the cache holds nothing for it after (no later event would
// release the cards); a delete after the hold releases it; the deletes are
// forgotten AssumeTTL later.
func TestAssumeRefusesADeletedPod(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := newCache(t, clk)
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16).Obj()); err != nil {
		t.Fatal(err)
	}
	early := kubeinfo.NewPodInfo(util.MakePod("early").UID("uid-early").GPUMem(6).Obj())
	c.DeletePod(early.UID) // the delete arrives between the bind's read of the pod and its hold
	if _, err := c.Assume(context.Background(), early, "n1"); !errors.Is(err, ErrPodGone) {
		t.Errorf("Assume after the pod's delete: %v, want ErrPodGone", err)
	}
	if diff := cmp.Diff([]int64{0}, used(t, c, "n1")); diff != "" {
		t.Errorf("n1 after the refused Assume (-want +got):\n%s", diff)
	}

	late := kubeinfo.NewPodInfo(util.MakePod("late").UID("uid-late").GPUMem(6).Obj())
	if _, err := c.Assume(context.Background(), late, "n1"); err != nil {
		t.Fatal(err)
	}
	c.DeletePod(late.UID) // the delete arrives after the hold
	if diff := cmp.Diff([]int64{0}, used(t, c, "n1")); diff != "" {
		t.Errorf("n1 after the held pod's delete (-want +got):\n%s", diff)
	}

	if got := len(c.gone); got != 2 {
		t.Errorf("deletes remembered: %d, want 2", got)
	}
	clk.Step(DefaultAssumeTTL)
	c.Expire()
	if got := len(c.gone); got != 2 {
		t.Errorf("deletes remembered at AssumeTTL: %d, want 2", got)
	}
	clk.Step(time.Second)
	c.Expire()
	if got := len(c.gone); got != 0 {
		t.Errorf("deletes remembered after AssumeTTL: %d, want 0", got)
	}
}
