package feed

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/util"
)

// startFeeder starts a cache fed by informers on client and waits for sync.
func startFeeder(t *testing.T, ctx context.Context, client *fake.Clientset) (*cache.Cache, *Feeder) {
	t.Helper()
	c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(ctx, c, client)
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

// used returns each card's Used on node name, as Inspect shows it.
func used(t *testing.T, c *cache.Cache, name string) []int64 {
	t.Helper()
	views, ok := c.Inspect(name)
	if !ok {
		t.Fatalf("node %s unknown", name)
	}
	out := make([]int64, len(views[0].Cards))
	for i, card := range views[0].Cards {
		out[i] = card.Used
	}
	return out
}

func sum(s []int64) int64 {
	var t int64
	for _, v := range s {
		t += v
	}
	return t
}

func TestFeederRebuildsAfterRestart(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(util.MakeNode("n1").Cards("T4", 16, 16).Obj())

	c1, _ := startFeeder(t, ctx, client)
	pod := util.MakePod("p").GPUMem(6).Obj()
	if _, err := client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alloc, err := c1.Assume(context.Background(), kubeinfo.NewPodInfo(pod), "n1")
	if err != nil {
		t.Fatal(err)
	}
	// Write the annotation and bind, as the extender does.
	bound := util.MakePod("p").GPUMem(6).Allocation(alloc).Node("n1").Obj()
	if _, err := client.CoreV1().Pods("default").Update(ctx, bound, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c1.FinishBinding(pod.UID)
	// A second pod carries an allocation annotation but no node: not our
	// Binding's, which writes both at once, so it holds nothing.
	mid := util.MakePod("q").GPUMem(3).Allocation(&gpushare.Allocation{Node: "n1", Unit: "GiB",
		Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 1, Units: 3}}}}}).Obj()
	if _, err := client.CoreV1().Pods("default").Create(ctx, mid, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the bound pod confirmed and the annotated one seen", func() bool {
		v, _ := c1.Inspect("n1")
		return len(v) == 1 && len(v[0].Ignored) == 1 && v[0].Cards[0].Pods[0].State == string(cache.StateBound)
	})
	want := used(t, c1, "n1")
	if diff := cmp.Diff([]int64{6, 0}, want); diff != "" {
		t.Fatalf("first cache (-want +got):\n%s", diff)
	}

	// A new extender process: a fresh cache from the same API state.
	c2, _ := startFeeder(t, ctx, client)
	if diff := cmp.Diff(want, used(t, c2, "n1")); diff != "" {
		t.Errorf("rebuilt cache (-want +got):\n%s", diff)
	}
	// Binding the annotated pod chooses its cards and holds them once.
	if _, err := c2.Assume(context.Background(), kubeinfo.NewPodInfo(mid), "n1"); err != nil {
		t.Fatal(err)
	}
	if got := sum(used(t, c2, "n1")); got != 9 {
		t.Errorf("after binding the annotated pod: %d units held, want 9", got)
	}
}

func TestFeederDeletesAndCapacity(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	alloc := &gpushare.Allocation{Node: "n1", Unit: "GiB", Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, Units: 8}}},
	}}
	client := fake.NewClientset(
		util.MakeNode("n1").Cards("T4", 16).Obj(),
		util.MakePod("p").GPUMem(8).Allocation(alloc).Node("n1").Obj(),
	)
	c, f := startFeeder(t, ctx, client)
	if diff := cmp.Diff([]int64{8}, used(t, c, "n1")); diff != "" {
		t.Fatalf("initial (-want +got):\n%s", diff)
	}
	// The informer serves PodInfo with what bind reads.
	lp, ok := f.Pod("default", "p")
	if !ok || lp.Demand == nil || lp.Allocation == nil || lp.UID != "uid-p" {
		t.Errorf("informer PodInfo lost demand, allocation or identity: %+v", lp)
	}

	// Capacity grows: the node is rebuilt and the pod re-applied.
	bigger := util.MakeNode("n1").Cards("A100", 80).Obj()
	if _, err := client.CoreV1().Nodes().Update(ctx, bigger, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node to grow", func() bool {
		v, _ := c.Inspect("n1")
		return v[0].Total == 80
	})
	if diff := cmp.Diff([]int64{8}, used(t, c, "n1")); diff != "" {
		t.Errorf("after resize (-want +got):\n%s", diff)
	}

	if err := client.CoreV1().Pods("default").Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pod's memory to be freed", func() bool { return used(t, c, "n1")[0] == 0 })

	if err := client.CoreV1().Nodes().Delete(ctx, "n1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the node to go", func() bool { _, ok := c.Inspect("n1"); return !ok })
}

// TestFeederSkipsUnchangedNodeUpdate checks that a node update that
// changes nothing the cache reads does not reach Cache.SetNode.
func TestFeederSkipsUnchangedNodeUpdate(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(util.MakeNode("n1").Cards("T4", 16, 16).Obj())
	c, _ := startFeeder(t, ctx, client)
	// Mark the cache's n1 behind the informer's back: one card of 8. Any
	// SetNode from an n1 event would put its two cards of 16 back.
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 8).Obj()); err != nil {
		t.Fatal(err)
	}
	heartbeat := util.MakeNode("n1").Cards("T4", 16, 16).Obj()
	heartbeat.Labels = map[string]string{"zone": "b"}
	heartbeat.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	if _, err := client.CoreV1().Nodes().Update(ctx, heartbeat, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node informer delivers events in order: once n2 is in the cache,
	// the heartbeat before it has been handled.
	if _, err := client.CoreV1().Nodes().Create(ctx, util.MakeNode("n2").Cards("T4", 16).Obj(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n2 in the cache", func() bool { _, ok := c.Inspect("n2"); return ok })
	if diff := cmp.Diff([]int64{0}, used(t, c, "n1")); diff != "" {
		t.Errorf("the heartbeat rebuilt n1 (-want +got):\n%s", diff)
	}

	// A real change still goes through.
	if _, err := client.CoreV1().Nodes().Update(ctx, util.MakeNode("n1").Cards("T4", 16, 16, 16).Obj(), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "n1 to get three cards", func() bool { return len(used(t, c, "n1")) == 3 })
}
