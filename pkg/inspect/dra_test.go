package inspect

import (
	"context"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/draview"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// draDevice is a card as the DRA driver publishes it: memory capacity in
// bytes, a request step of one unit.
func draDevice(index int, uuid, model string, gib int64, mode gpushare.Isolation, stepBytes int64) resourcev1.Device {
	total := resource.NewQuantity(gib<<30, resource.BinarySI)
	return resourcev1.Device{
		Name: "gpu-" + string(rune('0'+index)),
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"index": {IntValue: ptr.To(int64(index))}, "uuid": {StringValue: ptr.To(uuid)},
			"model": {StringValue: ptr.To(model)}, "isolation": {StringValue: ptr.To(string(mode))},
		},
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{draview.Memory: {
			Value: *total,
			RequestPolicy: &resourcev1.CapacityRequestPolicy{Default: total,
				ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: resource.NewQuantity(stepBytes, resource.BinarySI), Step: resource.NewQuantity(stepBytes, resource.BinarySI)}},
		}},
		AllowMultipleAllocations: ptr.To(true),
	}
}

// draSlice is node's slice of generation gen.
func draSlice(name, node, driver string, gen int64, devs ...resourcev1.Device) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
			Pool: resourcev1.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1}, Devices: devs},
	}
}

// draResult is an allocation of gib GiB (0: none consumed, the whole card)
// of device on node's pool.
func draResult(driver, node, device string, gib int64) resourcev1.DeviceRequestAllocationResult {
	r := resourcev1.DeviceRequestAllocationResult{Request: "gpu", Driver: driver, Pool: node, Device: device}
	if gib > 0 {
		r.ConsumedCapacity = map[resourcev1.QualifiedName]resource.Quantity{draview.Memory: *resource.NewQuantity(gib<<30, resource.BinarySI)}
	}
	return r
}

// draClaim is a claim allocated results, reserved by pod ("": none).
func draClaim(ns, name, pod string, results ...resourcev1.DeviceRequestAllocationResult) *resourcev1.ResourceClaim {
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if len(results) > 0 {
		c.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: results}}
	}
	if pod != "" {
		c.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod, UID: types.UID("uid-" + pod)}}
	}
	return c
}

// draCluster: node dra-a runs the DRA driver (two 16 GiB cards, the
// second tainted unhealthy, a stale slice of an older generation beside
// the current one); claims of 8 GiB (pod infer-0) and 4 GiB (no pod yet)
// share gpu-0, one without consumed capacity takes gpu-1 whole; a claim of
// another driver, an unallocated claim and a result on a device no slice
// has count nothing. Node dra-b runs the driver in MiB.
func draCluster() []runtime.Object {
	gib, mib := int64(1<<30), int64(1<<20)
	a := withIP(util.MakeNode("dra-a").Obj(), "10.0.1.1")
	b := withIP(util.MakeNode("dra-b").Obj(), "10.0.1.2")
	unhealthy := draDevice(1, "GPU-dra-a-1", "Tesla-T4", 16, gpushare.IsolationNone, gib)
	unhealthy.Taints = []resourcev1.DeviceTaint{{Key: draview.DriverName + "/unhealthy", Value: "xid", Effect: resourcev1.DeviceTaintEffectNoSchedule}}
	return []runtime.Object{
		a, b,
		draSlice("dra-a-old", "dra-a", draview.DriverName, 1, draDevice(0, "GPU-old", "Tesla-T4", 16, gpushare.IsolationNone, gib)),
		draSlice("dra-a-gpu", "dra-a", draview.DriverName, 2, unhealthy, draDevice(0, "GPU-dra-a-0", "Tesla-T4", 16, gpushare.IsolationMPS, gib)),
		draSlice("dra-a-other", "dra-a", "gpu.nvidia.com", 5, draDevice(7, "GPU-other", "H100", 80, gpushare.IsolationNone, gib)),
		draSlice("dra-b-gpu", "dra-b", draview.DriverName, 1, draDevice(0, "GPU-dra-b-0", "A100-SXM4-40GB", 40, gpushare.IsolationDriver, mib)),
		draClaim("default", "infer-0-gpu", "infer-0", draResult(draview.DriverName, "dra-a", "gpu-0", 8)),
		draClaim("team-a", "warm", "", draResult(draview.DriverName, "dra-a", "gpu-0", 4)),
		draClaim("default", "train-gpu", "train", draResult(draview.DriverName, "dra-a", "gpu-1", 0)),
		draClaim("default", "nvidia", "x", draResult("gpu.nvidia.com", "dra-a", "gpu-7", 0)),
		draClaim("default", "unallocated", ""),
		draClaim("default", "gone-card", "y", draResult(draview.DriverName, "dra-a", "gpu-9", 4)),
		draClaim("team-a", "notebook-gpu", "notebook", draResult(draview.DriverName, "dra-b", "gpu-0", 5)),
	}
}

// TestDRANodes: the report of the DRA driver's nodes, from its newest
// slices and the allocated claims.
func TestDRANodes(t *testing.T) {
	client := fake.NewClientset(draCluster()...)
	r, err := APISource{API: ClientAPI{Client: client}}.Report(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{
		{Name: "dra-a", Address: "10.0.1.1", Unit: gpushare.UnitGiB, Source: sourceDRA, Allocated: 28, Total: 32, Cards: []Card{
			{Index: 0, UUID: "GPU-dra-a-0", Model: "Tesla-T4", Allocated: 12, Total: 16, Healthy: true, Isolation: gpushare.IsolationMPS, Pods: []PodShare{
				{Namespace: "default", Name: "infer-0", Units: 8, State: stateReserved},
				{Namespace: "team-a", Name: "warm", Units: 4, State: stateAllocated}}},
			{Index: 1, UUID: "GPU-dra-a-1", Model: "Tesla-T4", Allocated: 16, Total: 16, Healthy: false, Isolation: gpushare.IsolationNone, Pods: []PodShare{
				{Namespace: "default", Name: "train", Units: 16, State: stateReserved}}},
		}},
		{Name: "dra-b", Address: "10.0.1.2", Unit: gpushare.UnitMiB, Source: sourceDRA, Allocated: 5120, Total: 40960, Cards: []Card{
			{Index: 0, UUID: "GPU-dra-b-0", Model: "A100-SXM4-40GB", Allocated: 5120, Total: 40960, Healthy: true, Isolation: gpushare.IsolationDriver, Pods: []PodShare{
				{Namespace: "team-a", Name: "notebook", Units: 5120, State: stateReserved}}},
		}},
	}
	if diff := cmp.Diff(want, r.Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Total{{Unit: gpushare.UnitGiB, Allocated: 28, Total: 32, Percent: 87}, {Unit: gpushare.UnitMiB, Allocated: 5120, Total: 40960, Percent: 12}}, r.Totals); diff != "" {
		t.Errorf("totals (-want +got):\n%s", diff)
	}
}

// TestDRANodeWithPluginCards: a node the device plugin publishes cards
// for keeps them even if the DRA driver publishes a slice for it too; a
// node not asked for is not shown.
func TestDRANodeWithPluginCards(t *testing.T) {
	objs := join(objs(nodeA()), podsA(), objs(
		draSlice("gpu-a-dra", "gpu-a", draview.DriverName, 1, draDevice(0, "GPU-x", "Tesla-T4", 16, gpushare.IsolationNone, 1<<30)),
		draSlice("other-dra", "other", draview.DriverName, 1, draDevice(0, "GPU-y", "Tesla-T4", 16, gpushare.IsolationNone, 1<<30))))
	client := fake.NewClientset(objs...)
	r, err := APISource{API: ClientAPI{Client: client}}.Report(context.Background(), Query{Node: "gpu-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Nodes) != 1 || r.Nodes[0].Source != "inventory" || r.Nodes[0].Cards[0].UUID != "GPU-a-0" {
		t.Errorf("nodes = %+v; want gpu-a alone with the device plugin's cards", r.Nodes)
	}
}

// TestDRASlicesFromTheDriver reads the ResourceSlices the DRA driver
// publishes today (testdata/dra-slices.yaml, which dra/pkg/devices
// TestInspectFixtureIsCurrent keeps current) with claims allocated from
// them: every card, its total in the node's unit (GiB, MiB), its health,
// and a claim's consumption under its pod.
func TestDRASlicesFromTheDriver(t *testing.T) {
	b, err := os.ReadFile("testdata/dra-slices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []resourcev1.ResourceSlice `json:"items"`
	}
	if err := yaml.Unmarshal(b, &list); err != nil {
		t.Fatal(err)
	}
	objs := []runtime.Object{util.MakeNode("n-gib").Obj(), util.MakeNode("n-mib").Obj(),
		draClaim("default", "infer-gpu", "infer", draResult(draview.DriverName, "n-gib", "gpu-0", 6)),
		draClaim("default", "train-gpu", "train", draResult(draview.DriverName, "n-mib", "gpu-1", 0))}
	for i := range list.Items {
		objs = append(objs, &list.Items[i])
	}
	r, err := APISource{API: ClientAPI{Client: fake.NewClientset(objs...)}}.Report(context.Background(), Query{})
	if err != nil {
		t.Fatal(err)
	}
	t4 := func(total, used int64, pods ...PodShare) Card {
		return Card{Index: 0, UUID: "GPU-0", Model: "Tesla-T4", Allocated: used, Total: total, Healthy: true, Isolation: gpushare.IsolationMPS, Pods: append([]PodShare{}, pods...)}
	}
	a100 := func(total, used int64, pods ...PodShare) Card {
		return Card{Index: 1, UUID: "GPU-1", Model: "A100-SXM4-40GB", Allocated: used, Total: total, Healthy: false, Isolation: gpushare.IsolationDriver, Pods: append([]PodShare{}, pods...)}
	}
	want := []Node{
		{Name: "n-gib", Unit: gpushare.UnitGiB, Source: sourceDRA, Allocated: 6, Total: 55, Cards: []Card{
			t4(15, 6, PodShare{Namespace: "default", Name: "infer", Units: 6, State: stateReserved}), a100(40, 0)}},
		{Name: "n-mib", Unit: gpushare.UnitMiB, Source: sourceDRA, Allocated: 40960, Total: 56320, Cards: []Card{
			t4(15360, 0), a100(40960, 40960, PodShare{Namespace: "default", Name: "train", Units: 40960, State: stateReserved})}},
	}
	if len(list.Items) != 2 {
		t.Fatalf("%d slices in the fixture, want 2", len(list.Items))
	}
	if diff := cmp.Diff(want, r.Nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}
