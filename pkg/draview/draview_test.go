package draview

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

func device(name string, index int64, bytes, step int64, taint resourcev1.DeviceTaintEffect) resourcev1.Device {
	d := resourcev1.Device{Name: name,
		Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{"uuid": {StringValue: ptr.To("GPU-" + name)}, "model": {StringValue: ptr.To("T4")}, "isolation": {StringValue: ptr.To("mps")}},
		Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{Memory: {Value: *resource.NewQuantity(bytes, resource.BinarySI),
			RequestPolicy: &resourcev1.CapacityRequestPolicy{ValidRange: &resourcev1.CapacityRequestPolicyRange{Min: resource.NewQuantity(step, resource.BinarySI), Step: resource.NewQuantity(step, resource.BinarySI)}}}},
	}
	if index >= 0 {
		d.Attributes["index"] = resourcev1.DeviceAttribute{IntValue: ptr.To(index)}
	}
	if taint != "" {
		d.Taints = []resourcev1.DeviceTaint{{Key: DriverName + "/unhealthy", Effect: taint}}
	}
	return d
}

func TestReadCard(t *testing.T) {
	for _, tc := range []struct {
		name string
		dev  resourcev1.Device
		want Card
		ok   bool
	}{
		{name: "GiB step", dev: device("gpu-3", 3, 16<<30, 1<<30, ""), ok: true,
			want: Card{Card: gpushare.Card{Index: 3, UUID: "GPU-gpu-3", Model: "T4"}, Isolation: gpushare.IsolationMPS, Healthy: true, Bytes: 16 << 30, Unit: gpushare.UnitGiB}},
		{name: "MiB step, index from the name, tainted", dev: device("gpu-2", -1, 1536<<20, 1<<20, resourcev1.DeviceTaintEffectNoSchedule), ok: true,
			want: Card{Card: gpushare.Card{Index: 2, UUID: "GPU-gpu-2", Model: "T4"}, Isolation: gpushare.IsolationMPS, Bytes: 1536 << 20, Unit: gpushare.UnitMiB}},
		{name: "no memory", dev: resourcev1.Device{Name: "gpu-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ReadCard(&tc.dev)
			if ok != tc.ok || !cmp.Equal(tc.want, got) {
				t.Errorf("ReadCard = %+v, %t; want %+v, %t", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestNodeCards: the newest generation of the node's pool only, slices by
// name, devices in slice order; other drivers and nodes skipped.
func TestNodeCards(t *testing.T) {
	slice := func(name, node, driver string, gen int64, devs ...resourcev1.Device) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node), Pool: resourcev1.ResourcePool{Name: node, Generation: gen}, Devices: devs}}
	}
	gib := int64(1 << 30)
	list := []*resourcev1.ResourceSlice{
		slice("n-b", "n", DriverName, 2, device("gpu-0", 0, 16*gib, gib, "")),
		slice("n-a", "n", DriverName, 2, device("gpu-2", 2, 24*gib, gib, ""), device("gpu-1", 1, 8*gib, gib, "")),
		slice("n-old", "n", DriverName, 1, device("gpu-9", 9, 8*gib, gib, "")),
		slice("n-other", "n", "other.example.com", 5, device("gpu-7", 7, 8*gib, gib, "")),
		slice("m-a", "m", DriverName, 1, device("gpu-5", 5, 8*gib, gib, "")),
	}
	var got []int
	for _, c := range NodeCards("n", list) {
		got = append(got, c.Index)
	}
	if diff := cmp.Diff([]int{2, 1, 0}, got); diff != "" {
		t.Errorf("card order (-want +got):\n%s", diff)
	}
}

func TestSharesAndRequest(t *testing.T) {
	cl := &resourcev1.ResourceClaim{Spec: draclaim.Template(resource.NewQuantity(8<<30, resource.BinarySI)).Spec.Spec}
	if b, ok := RequestBytes(&cl.Spec); !ok || b != 8<<30 {
		t.Errorf("RequestBytes = %d, %t; want 8 GiB", b, ok)
	}
	if Shares(cl) != nil {
		t.Errorf("an unallocated claim holds %v", Shares(cl))
	}
	cl.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{
		{Driver: DriverName, Pool: "n", Device: "gpu-1", ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{Memory: *resource.NewQuantity(8<<30, resource.BinarySI)}},
		{Driver: "other.example.com", Pool: "n", Device: "x"},
		{Driver: DriverName, Pool: "n", Device: "gpu-0"},
	}}}
	if diff := cmp.Diff([]Share{{Pool: "n", Device: "gpu-1", Bytes: 8 << 30}, {Pool: "n", Device: "gpu-0"}}, Shares(cl)); diff != "" {
		t.Errorf("Shares (-want +got):\n%s", diff)
	}
	two := cl.Spec.DeepCopy()
	two.Devices.Requests[0].Exactly.Count = 2
	other := cl.Spec.DeepCopy()
	other.Devices.Requests[0].Exactly.DeviceClassName = "other"
	noMem := cl.Spec.DeepCopy()
	noMem.Devices.Requests[0].Exactly.Capacity = nil
	twice := cl.Spec.DeepCopy()
	twice.Devices.Requests = append(twice.Devices.Requests, twice.Devices.Requests[0])
	for name, spec := range map[string]*resourcev1.ResourceClaimSpec{"two cards": two, "another class": other, "no memory": noMem, "two requests": twice} {
		if b, ok := RequestBytes(spec); ok {
			t.Errorf("%s: RequestBytes = %d, want none", name, b)
		}
	}
}

func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		unit  string
		want  int64
	}{{8 << 30, "GiB", 8}, {8<<30 + 1, "GiB", 9}, {1536 << 20, "MiB", 1536}, {1536 << 20, "GiB", 2}} {
		if got := Units(tc.bytes, tc.unit); got != tc.want {
			t.Errorf("Units(%d, %s) = %d, want %d", tc.bytes, tc.unit, got, tc.want)
		}
	}
	for name, ok := range map[string]bool{"gpu-0": true, "gpu-12": true, "gpu-": false, "cpu-1": false, "gpu--1": false} {
		if _, got := DeviceIndex(name); got != ok {
			t.Errorf("DeviceIndex(%q) ok = %t, want %t", name, got, ok)
		}
	}
}
