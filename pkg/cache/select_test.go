package cache

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/util"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// mixedNode publishes an inventory of healthy cards of the given models and
// sizes (GiB), UUIDs "GPU-<node>-<index>".
func mixedNode(name string, cards ...gpushare.Device) *util.NodeWrapper {
	inv := gpushare.Inventory{Unit: gpushare.UnitGiB}
	var total int64
	for i, d := range cards {
		d.Index, d.UUID, d.Healthy = i, fmt.Sprintf("GPU-%s-%d", name, i), true
		inv.Devices = append(inv.Devices, d)
		total += d.Memory
	}
	return util.MakeNode(name).Inventory(&inv).Capacity(total, int64(len(cards)))
}

// boundOn returns a pod bound to node holding units on card index, as the
// extender's bind annotates it.
func boundOn(name, node string, index int, units int64) *corev1.Pod {
	a := &gpushare.Allocation{Node: node, Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: index, UUID: fmt.Sprintf("GPU-%s-%d", node, index), Units: units}}}}}
	return util.MakePod(name).GPUMem(units).Node(node).Allocation(a).Obj()
}

// selectCluster is a cache of nodes with T4 and A100 cards, a cordoned
// card, a node without an inventory and one with an invalid cordon.
func selectCluster(t *testing.T) (*Cache, []string) {
	t.Helper()
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	t4 := gpushare.Device{Model: "Tesla T4", Memory: 16}
	a100 := gpushare.Device{Model: "A100-SXM4-80GB", Memory: 80}
	nodes := []*corev1.Node{
		mixedNode("t4", t4, t4).Obj(),
		mixedNode("a100", a100).Obj(),
		mixedNode("mixed", t4, a100, t4).Cordon("GPU-mixed-0", "GPU-gone").Obj(),
		util.MakeNode("legacy").Capacity(64, 2).Obj(),
		mixedNode("typo", t4).Cordon("GPU-typo-0,").Obj(),
	}
	var names []string
	for _, n := range nodes {
		if err := c.SetNode(n); err != nil && n.Name != "typo" {
			t.Fatal(err)
		}
		names = append(names, n.Name)
	}
	c.UpsertPod(boundOn("big-a", "a100", 0, 73))
	c.UpsertPod(boundOn("big-m", "mixed", 1, 70))
	return c, names
}

// TestFilterReasons: which nodes each constrained pod fits, and the reason
// filter gives for every other node (golden file).
func TestFilterReasons(t *testing.T) {
	c, names := selectCluster(t)
	pods := []*corev1.Pod{
		util.MakePod("plain").GPUMem(12).Obj(),
		util.MakePod("a100-12").GPUMem(12).GPUModels("A100*").Obj(),
		util.MakePod("a100-8").GPUMem(8).GPUModels("A100*").Obj(),
		util.MakePod("nvml-name").GPUMem(4).GPUModels("NVIDIA A100*").Obj(),
		util.MakePod("hyphen").GPUMem(4).GPUModels("Tesla-T4").Obj(),
		util.MakePod("no-t4").GPUMem(4).Annotation(gpushare.AnnotationGPUModelsExcluded, "*T4").Obj(),
		util.MakePod("one-card").GPUMem(4).Annotation(gpushare.AnnotationGPUUUIDs, "GPU-t4-1").Obj(),
		util.MakePod("not-these").GPUMem(4).Annotation(gpushare.AnnotationGPUUUIDsExcluded, "GPU-t4-0,GPU-t4-1,GPU-mixed-2").Obj(),
		util.MakePod("two-t4").GPUMemCards(16, 2).GPUModels("Tesla T4").Obj(),
	}
	var b strings.Builder
	for _, p := range pods {
		info := kubeinfo.NewPodInfo(p)
		fit, failed, err := c.Filter(context.Background(), info, names)
		if err != nil {
			t.Fatalf("Filter(%s): %v", p.Name, err)
		}
		fmt.Fprintf(&b, "pod %s asks %d GiB %s\n  fits: %s\n", p.Name, info.Demand.Total(), info.Constraints, strings.Join(fit, ", "))
		for _, n := range slices.Sorted(func(yield func(string) bool) {
			for n := range failed {
				if !yield(n) {
					return
				}
			}
		}) {
			fmt.Fprintf(&b, "  %s: %s\n", n, failed[n])
		}
		// FilterBest gives the same reasons and passes only nodes that fit.
		best, bestFailed, err := c.FilterBest(context.Background(), info, names)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(failed, bestFailed); diff != "" {
			t.Errorf("pod %s: FilterBest reasons differ from Filter's (-Filter +FilterBest):\n%s", p.Name, diff)
		}
		for _, n := range best {
			if !slices.Contains(fit, n) {
				t.Errorf("pod %s: FilterBest passes %s, where Filter says it does not fit", p.Name, n)
			}
		}
	}
	util.Golden(t, "filter-reasons.txt", b.String(), *update)
}

// TestAssumeHonoursConstraints: bind chooses only cards the pod's
// annotations allow, never a cordoned one, and the allocation says so.
func TestAssumeHonoursConstraints(t *testing.T) {
	c, _ := selectCluster(t)
	tests := []struct {
		pod  *corev1.Pod
		node string
		want []gpushare.DeviceShare
	}{
		// binpack would take the fuller T4 on mixed (card 2 is empty, card 0
		// cordoned) or the A100 with 10 free; only card 1 is an A100.
		{util.MakePod("a").GPUMem(8).GPUModels("A100*").Obj(), "mixed", []gpushare.DeviceShare{{Index: 1, UUID: "GPU-mixed-1", Units: 8}}},
		// Card 0 is cordoned: no pod lands there, constraints or not.
		{util.MakePod("b").GPUMem(16).Obj(), "mixed", []gpushare.DeviceShare{{Index: 2, UUID: "GPU-mixed-2", Units: 16}}},
		// The fuller T4 (card 0 after "c0") is excluded by UUID.
		{util.MakePod("c0").GPUMem(4).Obj(), "t4", []gpushare.DeviceShare{{Index: 0, UUID: "GPU-t4-0", Units: 4}}},
		{util.MakePod("c1").GPUMem(4).Annotation(gpushare.AnnotationGPUUUIDsExcluded, "GPU-t4-0").Obj(), "t4", []gpushare.DeviceShare{{Index: 1, UUID: "GPU-t4-1", Units: 4}}},
	}
	for _, tc := range tests {
		a, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(tc.pod), tc.node)
		if err != nil {
			t.Fatalf("Assume(%s, %s): %v", tc.pod.Name, tc.node, err)
		}
		if diff := cmp.Diff(tc.want, a.Containers[0].Devices); diff != "" {
			t.Errorf("pod %s: cards (-want +got):\n%s", tc.pod.Name, diff)
		}
	}
	var fe *allocator.FitError
	if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(util.MakePod("d").GPUMem(4).GPUModels("H100*").Obj()), "t4"); !errors.As(err, &fe) ||
		!strings.Contains(fe.Reason, "all 2 GPUs excluded (model Tesla T4 not H100*: 2)") {
		t.Errorf("Assume of an H100 pod on T4s: err = %v, want a FitError counting the excluded cards", err)
	}
	if _, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(util.MakePod("e").GPUMem(4).Obj()), "typo"); !errors.As(err, &fe) || !strings.Contains(fe.Reason, "takes no new GPU pods") {
		t.Errorf("Assume on a node with an invalid cordon: err = %v, want a FitError saying it takes no new pods", err)
	}
}

// TestInvalidConstraints: a pod whose card annotations are invalid fits
// nowhere, and every verb says why, naming the pod.
func TestInvalidConstraints(t *testing.T) {
	c, names := selectCluster(t)
	info := kubeinfo.NewPodInfo(util.MakePod("bad").GPUMem(4).Annotation(gpushare.AnnotationGPUUUIDs, "GPU-*").Obj())
	want := `pod default/bad: invalid gpushare annotation gpushare.io/gpu-uuids: "GPU-*" is not a UUID; UUIDs are matched exactly, without patterns or spaces; it fits no node until the annotation is fixed`
	check := func(verb string, err error) {
		t.Helper()
		if err == nil || err.Error() != want || !errors.Is(err, gpushare.ErrInvalid) {
			t.Errorf("%s: err = %v, want %q", verb, err, want)
		}
	}
	_, _, err := c.Filter(context.Background(), info, names)
	check("Filter", err)
	_, _, err = c.FilterBest(context.Background(), info, names)
	check("FilterBest", err)
	_, err = c.Score(context.Background(), info, names)
	check("Score", err)
	_, err = c.Assume(context.Background(), info, "t4")
	check("Assume", err)
}

// TestCordonKeepsRunningPods: cordoning a card after a pod landed on it
// does not make the extender distrust the pod's annotation: it stays
// charged on the card, which takes nothing new.
func TestCordonKeepsRunningPods(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	n := util.MakeNode("n1").Cards("Tesla T4", 16, 16)
	if err := c.SetNode(n.Obj()); err != nil {
		t.Fatal(err)
	}
	c.UpsertPod(boundOn("running", "n1", 0, 6))
	if err := c.SetNode(n.Cordon("GPU-n1-0").Obj()); err != nil {
		t.Fatal(err)
	}
	views, _ := c.Inspect("n1")
	v := views[0]
	if len(v.Ignored) != 0 || v.Cards[0].Used != 6 || !v.Cards[0].Cordoned || v.Cards[1].Cordoned {
		t.Errorf("after the cordon: %+v, want running still charged 6 on the cordoned card 0", v)
	}
	_, failed, err := c.Filter(context.Background(), kubeinfo.NewPodInfo(util.MakePod("wide").GPUMemCards(20, 2).Obj()), []string{"n1"})
	want := "container c0 needs 10 GiB on each of 2 GPUs; 1 GPU excluded (cordoned by the operator: 1); 1 of 1 eligible healthy GPUs have that much free"
	if err != nil || failed["n1"] != want {
		t.Errorf("Filter reason %q (err %v), want %q", failed["n1"], err, want)
	}
	a, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(util.MakePod("new").GPUMem(10).Obj()), "n1")
	if err != nil || a.Containers[0].Devices[0].Index != 1 {
		t.Fatalf("Assume = %+v, %v; want card 1 (card 0, fuller, is cordoned)", a, err)
	}
	// Uncordoned, card 0 takes pods again.
	if err := c.SetNode(n.Annotation(gpushare.AnnotationCordonedGPUs, "").Obj()); err != nil {
		t.Fatal(err)
	}
	a, err = c.Assume(context.Background(), kubeinfo.NewPodInfo(util.MakePod("later").GPUMem(10).Obj()), "n1")
	if err != nil || a.Containers[0].Devices[0].Index != 0 {
		t.Fatalf("Assume after uncordoning = %+v, %v; want card 0", a, err)
	}
}

// TestInspectShowsCordons: the views carry each card's cordon, the UUIDs
// the annotation names that the node lacks, and an invalid annotation.
func TestInspectShowsCordons(t *testing.T) {
	c, _ := selectCluster(t)
	views, _ := c.Inspect("")
	got := map[string]string{}
	for _, v := range views {
		var cordoned []int
		for _, card := range v.Cards {
			if card.Cordoned {
				cordoned = append(cordoned, card.Index)
			}
		}
		got[v.Name] = fmt.Sprintf("cordoned %v missing %v error %q", cordoned, v.CordonedMissing, v.CordonError)
	}
	want := map[string]string{
		"t4":     `cordoned [] missing [] error ""`,
		"a100":   `cordoned [] missing [] error ""`,
		"legacy": `cordoned [] missing [] error ""`,
		"mixed":  `cordoned [0] missing [GPU-gone] error ""`,
		"typo": `cordoned [0] missing [] error "invalid gpushare annotation gpushare.io/cordoned-gpus: entry 2 of \"GPU-typo-0,\" is empty; ` +
			`remove the extra comma; the node takes no new GPU pods until the annotation is fixed"`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("views (-want +got):\n%s", diff)
	}
}

func TestNewPodInfoConstraints(t *testing.T) {
	info := kubeinfo.NewPodInfo(util.MakePod("p").GPUMem(4).GPUModels("A100*", "H100*").Obj())
	if diff := cmp.Diff(&gpushare.CardConstraints{Models: []string{"A100*", "H100*"}}, info.Constraints); diff != "" || info.ConstraintsErr != nil {
		t.Errorf("constraints (-want +got):\n%s\nerr %v", diff, info.ConstraintsErr)
	}
	info = kubeinfo.NewPodInfo(util.MakePod("q").GPUMem(4).GPUModels("").Obj())
	if info.Constraints != nil || !errors.Is(info.ConstraintsErr, gpushare.ErrInvalid) {
		t.Errorf("empty gpu-models: constraints %v err %v, want ErrInvalid", info.Constraints, info.ConstraintsErr)
	}
}
