package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/draview"
	"github.com/gpushare/gpushare/pkg/feed"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/util"
)

// The feeder's tests that read what only the cache can see (its workload
// model, the CPU and memory it counts on a node) run here, beside the
// cache, through export_test.go; the others are in pkg/feed.

// draSlice is a slice of the gpushare DRA driver for node, generation gen,
// one 1 GiB-step device per card size (GiB) in the order given, named by
// index (indexes[i]).
func draSlice(node string, gen int64, indexes []int, gib []int64) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu-" + string(rune('a'+gen))},
		Spec: resourcev1.ResourceSliceSpec{Driver: draview.DriverName, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1}},
	}
	for i, idx := range indexes {
		total := resource.NewQuantity(gib[i]<<30, resource.BinarySI)
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{
			Name:       "gpu-" + string(rune('0'+idx)),
			Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"index": {IntValue: ptr.To(int64(idx))}, "uuid": {StringValue: ptr.To("GPU-" + node + "-" + string(rune('0'+idx)))}},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{draview.Memory: {Value: *total,
				RequestPolicy: &resourcev1.CapacityRequestPolicy{ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: resource.NewQuantity(1<<30, resource.BinarySI), Step: resource.NewQuantity(1<<30, resource.BinarySI)}}}},
		})
	}
	return s
}

// draClaim is a claim allocated gib GiB of node's device gpu-<idx>, or
// not allocated when node is "".
func draClaim(name, node string, idx int, gib int64) *resourcev1.ResourceClaim {
	cl := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)}}
	if node != "" {
		cl.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: draview.DriverName, Pool: node, Device: "gpu-" + string(rune('0'+idx)),
			ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{draview.Memory: *resource.NewQuantity(gib<<30, resource.BinarySI)},
		}}}}
	}
	return cl
}

// startFeeder starts a cache fed by informers on client and waits for sync.
func startFeeder(t *testing.T, ctx context.Context, client *fake.Clientset) (*cache.Cache, *feed.Feeder) {
	t.Helper()
	c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	f, err := feed.New(ctx, c, client)
	if err != nil {
		t.Fatal(err)
	}
	f.Start(ctx)
	if !f.WaitForSync(ctx) || !f.Synced() {
		t.Fatal("informers did not sync")
	}
	return c, f
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil }); err != nil {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// startDRAFeeder returns a binpack cache fed by client's informers, DRA
// included (GiB), once they have synced; they stop with ctx.
func startDRAFeeder(ctx context.Context, t *testing.T, client *fake.Clientset) *cache.Cache {
	t.Helper()
	c, err := cache.New(cache.Config{Policy: "binpack"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := feed.New(ctx, c, client)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.EnableDRA(gpushare.UnitGiB); err != nil {
		t.Fatal(err)
	}
	f.Start(ctx)
	if !f.WaitForSync(ctx) {
		t.Fatal("informers did not sync")
	}
	return c
}

// TestFeederDRA: with EnableDRA the cache takes a DRA node's cards from
// the newest generation of the driver's slice (the node itself carries no
// gpu-mem), charges each allocated claim on its card, forgets a claim when
// it is deallocated or deleted, and rates claim pods on DRA nodes only, on
// the card DRA's first fit takes (slice order), while gpu-mem pods keep off
// them.
func TestFeederDRA(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The pod of claim a1, marked for the node choice.
	user := util.MakePod("user-a1").UID("user-a1").Requests("2", "4Gi").Node("dra-a").Obj()
	user.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpushare.ResourceDRAClaim: resource.MustParse("1")}
	client := fake.NewClientset(
		util.MakeNode("dra-a").Obj(), util.MakeNode("dra-b").Obj(), util.MakeNode("plugin").Cards("T4", 16).Obj(),
		// dra-a's old slice (generation 1) is superseded by generation 2,
		// which lists card 1 before card 0.
		draSlice("dra-a", 1, []int{0}, []int64{8}),
		draSlice("dra-a", 2, []int{1, 0}, []int64{16, 16}),
		draSlice("dra-b", 1, []int{0}, []int64{16}),
		draClaim("a0", "dra-a", 0, 4),
		draClaim("pending", "", 0, 0),
		user,
	)
	c := startDRAFeeder(ctx, t, client)
	eventually(t, "dra-a's cards with claim a0", func() bool {
		src, cards := cache.CardsOf(t, c, "dra-a")
		return src == inspectapi.SourceDRA && cmp.Equal(cards, map[int][2]int64{0: {4, 16}, 1: {0, 16}})
	})
	if src, cards := cache.CardsOf(t, c, "plugin"); src != inspectapi.SourceInventory || len(cards) != 1 {
		t.Errorf("the device plugin's node: source %s, cards %v", src, cards)
	}

	// A claim pod of 8 GiB fits both DRA nodes; binpack rates a node by
	// its use once the pod is placed: dra-a 12 of 32 GiB, dra-b 8 of 16.
	claimPod := &kubeinfo.PodInfo{Name: "p", Namespace: "default", UID: "p", Demand: gpushare.Demand{{Name: "gpu", Units: 8, Cards: 1}}, DRA: true}
	best, failed, err := c.FilterBest(ctx, claimPod, []string{"dra-a", "dra-b", "plugin"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"dra-b"}, best); diff != "" {
		t.Errorf("best nodes of the claim pod (-want +got):\n%s", diff)
	}
	if _, ok := failed["plugin"]; !ok {
		t.Errorf("the device plugin's node is not failed for a claim pod: %v", failed)
	}
	gpuPod := &kubeinfo.PodInfo{Name: "g", Namespace: "default", UID: "g", Demand: gpushare.Demand{{Name: "c0", Units: 8, Cards: 1}}}
	if fit, _, err := c.Filter(ctx, gpuPod, []string{"dra-a", "dra-b", "plugin"}); err != nil || !cmp.Equal(fit, []string{"plugin"}) {
		t.Errorf("a gpu-mem pod fits %v (%v), want only the device plugin's node", fit, err)
	}

	// Fill dra-a's card 1 with a claim: dra-a would then be 28 of 32 GiB
	// used, binpack's choice.
	a1 := draClaim("a1", "dra-a", 1, 16)
	a1.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: "user-a1", UID: "user-a1"}}
	if _, err := client.ResourceV1().ResourceClaims("default").Create(ctx, a1, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "claim a1 charged", func() bool {
		_, cards := cache.CardsOf(t, c, "dra-a")
		return cards[1] == [2]int64{16, 16}
	})
	// The workload model learnt a0 (no pod known: no CPU) and a1 with its
	// pod's 2 cores, and not a1's pod as one asking no GPU memory.
	cpuPerGiB := cache.CPUPerUnit(c)
	if want := 2000 / (4*0.999 + 16); !cmp.Equal(want, cpuPerGiB, cmpopts.EquateApprox(1e-9, 0)) {
		t.Errorf("CPU per GiB learnt from the claims: %v, want %v", cpuPerGiB, want)
	}
	if best, _, err := c.FilterBest(ctx, claimPod, []string{"dra-a", "dra-b"}); err != nil || !cmp.Equal(best, []string{"dra-a"}) {
		t.Errorf("best nodes %v (%v), want dra-a (its card 0 holds 4 GiB)", best, err)
	}

	// Deallocated, then deleted: forgotten.
	a0 := draClaim("a0", "", 0, 0)
	if _, err := client.ResourceV1().ResourceClaims("default").Update(ctx, a0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := client.ResourceV1().ResourceClaims("default").Delete(ctx, "a1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "claims released", func() bool {
		_, cards := cache.CardsOf(t, c, "dra-a")
		return cmp.Equal(cards, map[int][2]int64{0: {0, 16}, 1: {0, 16}})
	})

	// The driver's slice gone: the node has no cards.
	for _, name := range []string{"dra-b-gpu-b"} {
		if err := client.ResourceV1().ResourceSlices().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "dra-b without cards", func() bool {
		src, cards := cache.CardsOf(t, c, "dra-b")
		return src == inspectapi.SourceNone && len(cards) == 0
	})
}

// TestFeederDRAWholeCard: a claim of a whole card (no consumed capacity)
// is charged the card's size from the driver's slice, also when the
// slice comes after the claim or changes the card's size; a claim of a
// share keeps its share.
func TestFeederDRAWholeCard(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	whole := draClaim("whole", "dra-w", 0, 0)
	whole.Status.Allocation.Devices.Results[0].ConsumedCapacity = nil
	client := fake.NewClientset(util.MakeNode("dra-w").Obj(), whole, draClaim("share", "dra-w", 1, 4))
	c := startDRAFeeder(ctx, t, client)
	if _, err := client.ResourceV1().ResourceSlices().Create(ctx, draSlice("dra-w", 1, []int{0, 1}, []int64{16, 16}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the whole card charged 16 GiB once the slice comes", func() bool {
		_, cards := cache.CardsOf(t, c, "dra-w")
		return cmp.Equal(cards, map[int][2]int64{0: {16, 16}, 1: {4, 16}})
	})
	bigger := draSlice("dra-w", 1, []int{0, 1}, []int64{24, 16})
	bigger.Name = "dra-w-gpu-b" // the same slice, card 0 now 24 GiB
	if _, err := client.ResourceV1().ResourceSlices().Update(ctx, bigger, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the whole card charged 24 GiB once the slice says so", func() bool {
		_, cards := cache.CardsOf(t, c, "dra-w")
		return cmp.Equal(cards, map[int][2]int64{0: {24, 24}, 1: {4, 16}})
	})
}

// TestFeederDRAWinsOverAStaleInventory: a node that moved from the device
// plugin to the DRA driver still carries the plugin's inventory
// (gpushare.io/devices, which nothing removes) and its aliyun.com/gpu-mem
// capacity, but no allocatable gpu-mem (kubelet's answer once the plugin
// is gone), and still runs a 12 GiB pod of the plugin on card 0. The
// driver's slice publishes card 0 with that pod's memory taken off. The
// cache takes the node's cards from the slice, does not charge the
// plugin's pod on top of it, places claim pods there and gpu-mem pods no
// longer. Once the plugin serves the node again (the node moved back;
// kubelet deletes the driver's slice only 30 s after the driver stops),
// its inventory counts again, and so does its pod.
func TestFeederDRAWinsOverAStaleInventory(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	legacy := util.MakePod("legacy").UID("legacy").GPUMem(12).Node("moved").Phase(corev1.PodRunning).Allocation(&gpushare.Allocation{
		Node: "moved", Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, UUID: "GPU-moved-0", Units: 12}}}},
	}).Obj()
	moved := util.MakeNode("moved").Cards("T4", 16, 16).Obj()
	moved.Status.Allocatable[gpushare.ResourceGPUMem] = resource.MustParse("0")
	client := fake.NewClientset(moved, legacy, draSlice("moved", 1, []int{0, 1}, []int64{4, 16}))
	c := startDRAFeeder(ctx, t, client)
	eventually(t, "moved's cards from the driver's slice", func() bool {
		src, cards := cache.CardsOf(t, c, "moved")
		return src == inspectapi.SourceDRA && cmp.Equal(cards, map[int][2]int64{0: {0, 4}, 1: {0, 16}})
	})
	claimPod := &kubeinfo.PodInfo{Name: "p", Namespace: "default", UID: "p", Demand: gpushare.Demand{{Name: "gpu", Units: 4, Cards: 1}}, DRA: true}
	if fit, _, err := c.Filter(ctx, claimPod, []string{"moved"}); err != nil || !cmp.Equal(fit, []string{"moved"}) {
		t.Errorf("a 4 GiB claim pod fits %v (%v), want moved", fit, err)
	}
	gpuPod := &kubeinfo.PodInfo{Name: "g", Namespace: "default", UID: "g", Demand: gpushare.Demand{{Name: "c0", Units: 4, Cards: 1}}}
	if fit, _, err := c.Filter(ctx, gpuPod, []string{"moved"}); err != nil || len(fit) != 0 {
		t.Errorf("a gpu-mem pod fits %v (%v), want none: the node serves DRA claims", fit, err)
	}

	// The device plugin serves the node again, the driver's slice not
	// gone yet.
	back := util.MakeNode("moved").Cards("T4", 16, 16).Obj()
	if _, err := client.CoreV1().Nodes().Update(ctx, back, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "moved back on its inventory", func() bool {
		src, cards := cache.CardsOf(t, c, "moved")
		return src == inspectapi.SourceInventory && cmp.Equal(cards, map[int][2]int64{0: {12, 16}, 1: {0, 16}})
	})
}

// TestFeederPodRecreatedInWatchGap: a pod deleted and re-created under the
// same name while the watch was down comes back from the relist as one
// update from the old UID to the new, with no delete; the old pod's cards
// and CPU must be released.
func TestFeederPodRecreatedInWatchGap(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	allocOn := func(card int, units int64) *gpushare.Allocation {
		return &gpushare.Allocation{Node: "n1", Unit: "GiB", Containers: []gpushare.ContainerAllocation{
			{Name: "c0", Devices: []gpushare.DeviceShare{{Index: card, Units: units}}}}}
	}
	client := fake.NewClientset(
		util.MakeNode("n1").Host("32", "64Gi").Cards("T4", 16, 16).Obj(),
		util.MakePod("p").UID("uid-old").GPUMem(6).Requests("4", "1Gi").Allocation(allocOn(0, 6)).Node("n1").Obj(),
	)
	gap := util.NewWatchGap(client, "pods")
	c, _ := startFeeder(t, ctx, client)
	if diff := cmp.Diff([]int64{6, 0}, cache.Used(t, c, "n1")); diff != "" {
		t.Fatalf("before (-want +got):\n%s", diff)
	}
	pods := client.CoreV1().Pods("default")
	if err := pods.Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := util.MakePod("p").UID("uid-new").GPUMem(4).Requests("1", "1Gi").Allocation(allocOn(1, 4)).Node("n1").Obj()
	if _, err := pods.Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !gap.Expire() {
		t.Fatal("the informer opened no watch")
	}
	eventually(t, "the relist to replace the pod", func() bool {
		return cmp.Equal([]int64{0, 4}, cache.Used(t, c, "n1"))
	})
	if diff := cmp.Diff([2]int64{1000, 1024}, cache.HostUsed(t, c, "n1")); diff != "" {
		t.Errorf("CPU and memory held [millicores, MiB] (-want +got):\n%s", diff)
	}
}
