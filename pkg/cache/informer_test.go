package cache

import (
	"context"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// startFeeder starts a cache fed by informers on client and waits for sync.
func startFeeder(t *testing.T, ctx context.Context, client *fake.Clientset) (*Cache, *Feeder) {
	t.Helper()
	c, err := New(Config{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	f, err := NewFeeder(ctx, c, client)
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
	alloc, err := c1.Assume(context.Background(), NewPodInfo(pod), "n1")
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
		return len(v) == 1 && len(v[0].Ignored) == 1 && v[0].Cards[0].Pods[0].State == StateBound
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
	if _, err := c2.Assume(context.Background(), NewPodInfo(mid), "n1"); err != nil {
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

func TestPodInfoKeepsWhatTheExtenderReads(t *testing.T) {
	restart := corev1.ContainerRestartPolicyAlways
	pod := util.MakePod("p").GPUMemCards(8, 2).Container("plain").
		Annotation("unrelated", "x").Annotation(gpushare.AnnotationIndex, "1").Annotation(gpushare.AnnotationPolicy, "spread").
		Node("n1").Phase(corev1.PodRunning).Obj()
	pod.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: &restart, Resources: pod.Spec.Containers[0].Resources}}
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	pod.ResourceVersion = "42"
	pod.Labels = map[string]string{"app": "infer"}
	prio, grace, never := int32(1000), int64(90), corev1.PreemptNever
	pod.Spec.Priority, pod.Spec.TerminationGracePeriodSeconds, pod.Spec.PreemptionPolicy = &prio, &grace, &never
	started := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	pod.Status.StartTime = &started
	want, _ := gpushare.PodDemand(pod)
	got := NewPodInfo(pod)
	wantInfo := &PodInfo{
		Name: "p", Namespace: "default", UID: "uid-p", ResourceVersion: "42", Labels: LabelSet{{"app", "infer"}},
		NodeName: "n1", Phase: corev1.PodRunning, Demand: want, LegacyIndex: 1, Policy: "spread",
		Priority: 1000, PreemptNever: true, GraceSeconds: 90, StartTime: started.Time,
	}
	if diff := cmp.Diff(wantInfo, got); diff != "" {
		t.Errorf("NewPodInfo (-want +got):\n%s", diff)
	}
	if info := NewPodInfo(util.MakePod("cpu").Container("x").Obj()); info.Demand != nil || info.LegacyIndex != -1 {
		t.Errorf("NewPodInfo of a CPU pod = %+v", info)
	}
	// An Aliyun index beyond 32 bits names no card (the cache keeps 32).
	if info := NewPodInfo(util.MakePod("big").GPUMem(4).Annotation(gpushare.AnnotationIndex, "2147483648").Obj()); info.LegacyIndex != -1 {
		t.Errorf("NewPodInfo of a pod with index 2³¹: LegacyIndex %d, want -1", info.LegacyIndex)
	}
	// The allocation shares the pod's node name and the unit constant.
	placed := util.MakePod("placed").GPUMem(4).Node("n1").Allocation(&gpushare.Allocation{Node: "n1", Unit: gpushare.UnitGiB,
		Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, Units: 4}}}}}).Obj()
	placed.Spec.NodeName = strings.Clone(placed.Spec.NodeName) // its own copy, as a decoded pod has
	info := NewPodInfo(placed)
	switch {
	case info.Allocation == nil:
		t.Errorf("NewPodInfo of a placed pod: no allocation (%s)", info.AllocationErr)
	case unsafe.StringData(info.Allocation.Node) != unsafe.StringData(info.NodeName) || unsafe.StringData(info.Allocation.Unit) != unsafe.StringData(gpushare.UnitGiB):
		t.Errorf("NewPodInfo: the allocation's node and unit are copies, not the pod's node name and the unit constant")
	}
	// A CPU pod's labels are not kept (only GPU pods are ever evicted for
	// a preemption); a deleted pod is terminating, for its deletion's grace.
	cpu := util.MakePod("cpu").Container("x").Obj()
	cpu.Labels = map[string]string{"app": "web"}
	now, short := metav1.Now(), int64(5)
	cpu.DeletionTimestamp, cpu.DeletionGracePeriodSeconds = &now, &short
	if info := NewPodInfo(cpu); info.Labels != nil || !info.Terminating || info.GraceSeconds != 5 {
		t.Errorf("NewPodInfo of a terminating CPU pod = %+v", info)
	}
}

// TestNewNodeInfo: a NodeInfo holds what SetNode reads of a node, the
// allocatable amounts before the capacity, and nothing else.
func TestNewNodeInfo(t *testing.T) {
	n := util.MakeNode("n1").Host("32", "128Gi").Cards("T4", 16, 16).Cordon("GPU-n1-0").Annotation("team", "a").Obj()
	n.UID, n.ResourceVersion = "uid-n1", "7"
	n.Status.Capacity[gpushare.ResourceGPUMem] = resource.MustParse("40") // allocatable (32) wins
	delete(n.Status.Allocatable, gpushare.ResourceGPUCount)               // capacity (2) then
	want := &NodeInfo{Name: "n1", UID: "uid-n1", ResourceVersion: "7", nodeReads: nodeReads{
		inventory: n.Annotations[gpushare.AnnotationInventory], hasInventory: true,
		cordoned: "GPU-n1-0", hasCordoned: true,
		gpuMem: 32, gpuCount: 2, milliCPU: 32000, memMiB: 128 << 10, hostKnown: true,
	}}
	if diff := cmp.Diff(want, NewNodeInfo(n), cmp.AllowUnexported(NodeInfo{}, nodeReads{})); diff != "" {
		t.Errorf("NewNodeInfo (-want +got):\n%s", diff)
	}
	if got := NewNodeInfo(util.MakeNode("bare").Obj()); got.hasInventory || got.hasCordoned || got.gpuMem != 0 || got.gpuCount != 0 {
		t.Errorf("NewNodeInfo of a node without GPUs = %+v", got)
	}
}

func TestSameNodeInputs(t *testing.T) {
	base := func() *corev1.Node { return util.MakeNode("n1").Cards("T4", 16, 16).Obj() }
	tests := []struct {
		name   string
		change func(n *corev1.Node)
		want   bool
	}{
		{"heartbeat", func(n *corev1.Node) {
			n.ResourceVersion = "43"
			n.Labels = map[string]string{"zone": "b"}
			n.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
		}, true},
		{"same quantity spelled otherwise", func(n *corev1.Node) {
			n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("32768Mi")
		}, true},
		{"inventory changed", func(n *corev1.Node) {
			n.Annotations = util.MakeNode("n1").Cards("T4", 16, 16).Unhealthy(1).Obj().Annotations
		}, false},
		{"inventory removed", func(n *corev1.Node) { n.Annotations = nil }, false},
		{"inventory emptied", func(n *corev1.Node) { n.Annotations[gpushare.AnnotationInventory] = "" }, false},
		{"cordon added", func(n *corev1.Node) { n.Annotations[gpushare.AnnotationCordonedGPUs] = "GPU-n1-0" }, false},
		{"another annotation added", func(n *corev1.Node) { n.Annotations["team"] = "a" }, true},
		{"allocatable CPU changed", func(n *corev1.Node) {
			n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("7")
		}, false},
		{"gpu-mem allocatable changed", func(n *corev1.Node) {
			n.Status.Allocatable[gpushare.ResourceGPUMem] = resource.MustParse("24")
		}, false},
		{"gpu-mem capacity changed under an allocatable", func(n *corev1.Node) {
			n.Status.Capacity[gpushare.ResourceGPUMem] = resource.MustParse("24")
		}, true},
		{"gpu-mem capacity changed without an allocatable", func(n *corev1.Node) {
			delete(n.Status.Allocatable, gpushare.ResourceGPUMem)
			n.Status.Capacity[gpushare.ResourceGPUMem] = resource.MustParse("24")
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			changed := base()
			tc.change(changed)
			// The informer compares what SetNode reads.
			if got := NewNodeInfo(base()).nodeReads == NewNodeInfo(changed).nodeReads; got != tc.want {
				t.Errorf("same inputs = %v, want %v", got, tc.want)
			}
		})
	}
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
	if diff := cmp.Diff([]int64{6, 0}, used(t, c, "n1")); diff != "" {
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
		return cmp.Equal([]int64{0, 4}, used(t, c, "n1"))
	})
	if diff := cmp.Diff([2]int64{1000, 1024}, hostUsed(t, c, "n1")); diff != "" {
		t.Errorf("CPU and memory held [millicores, MiB] (-want +got):\n%s", diff)
	}
}

// TestLabelSet: a LabelSet answers as the labels.Set of its map does, and
// a selector matches it as it matches the map.
func TestLabelSet(t *testing.T) {
	m := map[string]string{"team": "a", "app": "train", "tier": ""}
	l := NewLabelSet(m)
	if diff := cmp.Diff(LabelSet{{"app", "train"}, {"team", "a"}, {"tier", ""}}, l); diff != "" {
		t.Errorf("NewLabelSet (-want +got):\n%s", diff)
	}
	for _, key := range []string{"app", "team", "tier", "zone", "", "ap", "teams"} {
		v, ok := l.Lookup(key)
		wv, wok := labels.Set(m).Lookup(key)
		if v != wv || ok != wok || l.Has(key) != wok || l.Get(key) != wv {
			t.Errorf("key %q: Lookup %q %v, Has %v, Get %q; want %q %v", key, v, ok, l.Has(key), l.Get(key), wv, wok)
		}
	}
	for _, sel := range []string{"app=train", "app=infer", "team in (a,b)", "!zone", "tier", "tier=", "app,team=a", "zone"} {
		s, err := labels.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.Matches(l), s.Matches(labels.Set(m)); got != want {
			t.Errorf("selector %q matches the LabelSet: %v, the map: %v", sel, got, want)
		}
	}
	if NewLabelSet(nil) != nil || LabelSet(nil).Has("a") {
		t.Error("an empty LabelSet is not nil, or has labels")
	}
}

// TestPodInfoObjectMetaIsOneAllocation: the informer computes a pod's
// store key through GetObjectMeta on every event; it makes the metadata
// and nothing more (no labels map).
func TestPodInfoObjectMetaIsOneAllocation(t *testing.T) {
	p := util.MakePod("p").GPUMem(4).Obj()
	p.Labels = map[string]string{"app": "train", "team": "a"}
	info := NewPodInfo(p)
	if len(info.Labels) != 2 {
		t.Fatalf("labels %v", info.Labels)
	}
	key, err := toolscache.MetaNamespaceKeyFunc(info)
	if err != nil || key != "default/p" {
		t.Fatalf("key %q, %v", key, err)
	}
	var sink metav1.Object
	if n := testing.AllocsPerRun(100, func() { sink = info.GetObjectMeta() }); n != 1 {
		t.Errorf("GetObjectMeta allocates %v times, want 1", n)
	}
	if sink.GetName() != "p" || sink.GetNamespace() != "default" {
		t.Errorf("GetObjectMeta = %+v", sink)
	}
}
