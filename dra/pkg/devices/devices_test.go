package devices

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/pkg/draview"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

func TestCapacityMiB(t *testing.T) {
	for _, tc := range []struct {
		name string
		mem  int64
		unit string
		want int64
	}{
		{name: "whole GiB", mem: 16384, unit: gpushare.UnitGiB, want: 16384},
		{name: "GiB rounds down", mem: 16280, unit: gpushare.UnitGiB, want: 15360},
		{name: "MiB keeps all", mem: 16280, unit: gpushare.UnitMiB, want: 16280},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CapacityMiB(tc.mem, tc.unit); got != tc.want {
				t.Errorf("CapacityMiB(%d, %s) = %d, want %d", tc.mem, tc.unit, got, tc.want)
			}
		})
	}
}

func TestOrder(t *testing.T) {
	cards := []Card{
		{Card: gpushare.Card{Index: 0}, CapacityMiB: 81920},
		{Card: gpushare.Card{Index: 1}, CapacityMiB: 16384},
		{Card: gpushare.Card{Index: 2}, CapacityMiB: 24576},
		{Card: gpushare.Card{Index: 3}, CapacityMiB: 16384},
	}
	for _, tc := range []struct {
		order Order
		want  []string
	}{
		{order: OrderIndex, want: []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"}},
		{order: OrderSmallestFirst, want: []string{"gpu-1", "gpu-3", "gpu-2", "gpu-0"}},
		{order: OrderLargestFirst, want: []string{"gpu-0", "gpu-2", "gpu-1", "gpu-3"}},
	} {
		t.Run(string(tc.order), func(t *testing.T) {
			var got []string
			for _, d := range List(cards, tc.order, Info{Unit: gpushare.UnitGiB}) {
				got = append(got, d.Name)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("device order (-want +got):\n%s", diff)
			}
			if o, err := ParseOrder(string(tc.order)); err != nil || o != tc.order {
				t.Errorf("ParseOrder(%q) = %q, %v", tc.order, o, err)
			}
		})
	}
	if _, err := ParseOrder("random"); err == nil || !strings.Contains(err.Error(), "want one of index, smallest-first, largest-first") {
		t.Errorf(`ParseOrder("random"): err = %v, want one naming the choices`, err)
	}
}

func TestList(t *testing.T) {
	gib := resource.MustParse("1Gi")
	mib := resource.MustParse("1Mi")
	t4 := resource.MustParse("15Gi")
	t4MiB := resource.MustParse("16280Mi")
	card := Card{Card: gpushare.Card{Index: 1, UUID: "GPU-1", Model: "Tesla-T4", MemoryMiB: 16280}, CapacityMiB: 15360, Isolation: gpushare.IsolationMPS}
	for _, tc := range []struct {
		name string
		card Card
		info Info
		want resourceapi.Device
	}{{
		name: "GiB, unhealthy, driver version known",
		card: card,
		info: Info{DriverVersion: "550.54.15", Unit: gpushare.UnitGiB, Unhealthy: map[string]bool{"GPU-1": true}},
		want: resourceapi.Device{
			Name: "gpu-1",
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index":         {IntValue: ptr.To(int64(1))},
				"uuid":          {StringValue: ptr.To("GPU-1")},
				"model":         {StringValue: ptr.To("Tesla-T4")},
				"isolation":     {StringValue: ptr.To("mps")},
				"mig":           {BoolValue: ptr.To(false)},
				"driverVersion": {StringValue: ptr.To("550.54.15")},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				CapacityMemory: {Value: t4, RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default: &t4, ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &gib, Step: &gib},
				}},
			},
			AllowMultipleAllocations: ptr.To(true),
			Taints:                   []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: "xid", Effect: resourceapi.DeviceTaintEffectNoSchedule}},
		},
	}, {
		name: "MiB, healthy, no driver version",
		card: func() Card { c := card; c.CapacityMiB = 16280; c.MIG = true; return c }(),
		info: Info{Unit: gpushare.UnitMiB},
		want: resourceapi.Device{
			Name: "gpu-1",
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index":     {IntValue: ptr.To(int64(1))},
				"uuid":      {StringValue: ptr.To("GPU-1")},
				"model":     {StringValue: ptr.To("Tesla-T4")},
				"isolation": {StringValue: ptr.To("mps")},
				"mig":       {BoolValue: ptr.To(true)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				CapacityMemory: {Value: t4MiB, RequestPolicy: &resourceapi.CapacityRequestPolicy{
					Default: &t4MiB, ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: &mib, Step: &mib},
				}},
			},
			AllowMultipleAllocations: ptr.To(true),
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := List([]Card{tc.card}, OrderIndex, tc.info)
			// Quantities compare by value (Cmp), not by their cached strings.
			if diff := cmp.Diff([]resourceapi.Device{tc.want}, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
				t.Errorf("List (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPublished: what pods outside DRA hold is taken off a card's
// capacity in whole units, and a card with less than two units left is
// not listed.
func TestPublished(t *testing.T) {
	t4 := Card{Card: gpushare.Card{Index: 0, UUID: "GPU-0"}, CapacityMiB: 16384}
	for _, tc := range []struct {
		name string
		held int64 // MiB
		unit string
		want int64 // MiB
	}{
		{name: "nothing held", unit: gpushare.UnitGiB, want: 16384},
		{name: "12 GiB held", held: 12288, unit: gpushare.UnitGiB, want: 4096},
		{name: "4.5 GiB held rounds down", held: 4608, unit: gpushare.UnitGiB, want: 11264},
		{name: "4.5 GiB held in MiB", held: 4608, unit: gpushare.UnitMiB, want: 11776},
		{name: "15 GiB held: one unit left", held: 15360, unit: gpushare.UnitGiB, want: 0},
		{name: "more than the card", held: 20000, unit: gpushare.UnitGiB, want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Published(t4, tc.held, tc.unit); got != tc.want {
				t.Errorf("Published(16384 MiB card, %d held, %s) = %d, want %d", tc.held, tc.unit, got, tc.want)
			}
		})
	}
	info := Info{Unit: gpushare.UnitGiB, Held: map[string]int64{"GPU-0": 12288, "GPU-1": 15360}}
	got := map[string]int64{}
	for _, d := range List([]Card{t4, {Card: gpushare.Card{Index: 1, UUID: "GPU-1"}, CapacityMiB: 16384}, {Card: gpushare.Card{Index: 2, UUID: "GPU-2"}, CapacityMiB: 16384}}, OrderIndex, info) {
		c := d.Capacity[CapacityMemory]
		got[d.Name] = c.Value.Value() >> 20
		if def := c.RequestPolicy.Default.Value() >> 20; def != got[d.Name] {
			t.Errorf("%s: request policy default %d MiB, capacity %d", d.Name, def, got[d.Name])
		}
	}
	if diff := cmp.Diff(map[string]int64{"gpu-0": 4096, "gpu-2": 16384}, got); diff != "" {
		t.Errorf("devices listed, MiB (-want +got):\n%s", diff)
	}
}

type fakeFeatures map[string]gpu.Features

func (f fakeFeatures) Features(uuid string) (gpu.Features, error) {
	if ft, ok := f[uuid]; ok {
		return ft, nil
	}
	return gpu.Features{}, errors.New("no such card")
}

func TestCardsOf(t *testing.T) {
	devs := []gpu.Device{
		{Card: gpushare.Card{Index: 0, UUID: "GPU-a", Model: "T4", MemoryMiB: 16280}},
		{Card: gpushare.Card{Index: 1, UUID: "GPU-b", Model: "A100", MemoryMiB: 81920}},
		{Card: gpushare.Card{Index: 2, UUID: "GPU-c", Model: "A30", MemoryMiB: 24576}, MIG: true},
	}
	got, err := CardsOf("node-a", devs, gpushare.UnitGiB, fakeFeatures{"GPU-b": {MIG: true}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Card{
		{Card: gpushare.Card{Index: 0, UUID: "GPU-a", Model: "T4", MemoryMiB: 16280}, CapacityMiB: 15360},
		{Card: gpushare.Card{Index: 1, UUID: "GPU-b", Model: "A100", MemoryMiB: 81920}, CapacityMiB: 81920, MIG: true},
		{Card: gpushare.Card{Index: 2, UUID: "GPU-c", Model: "A30", MemoryMiB: 24576}, CapacityMiB: 24576, MIG: true},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("CardsOf (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		name string
		devs []gpu.Device
		want string
	}{
		{name: "no cards", want: "no GPUs found on node node-a"},
		{name: "under two units", devs: []gpu.Device{{Card: gpushare.Card{Index: 3, UUID: "GPU-d", MemoryMiB: 2000}}}, want: "GPU 3 (GPU-d) on node node-a has 2000 MiB, less than two GiB; use --memory-unit MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := CardsOf("node-a", tc.devs, gpushare.UnitGiB, fakeFeatures{})
			if err == nil || err.Error() != tc.want {
				t.Errorf("CardsOf: err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestDeviceClass(t *testing.T) {
	dc := DeviceClass()
	if dc.Name != DeviceClassName || len(dc.Spec.Selectors) != 1 || dc.Spec.Selectors[0].CEL.Expression != `device.driver == "gpu.gpushare.io"` {
		t.Errorf("DeviceClass = %+v, want %s selecting driver %s", dc, DeviceClassName, DriverName)
	}
}

// TestWebhookAgrees: the webhook's conversion of aliyun.com/gpu-mem pods
// (root module, package draclaim) names this driver's DeviceClass and
// capacity.
func TestWebhookAgrees(t *testing.T) {
	if draclaim.DeviceClassName != DeviceClassName || string(draclaim.MemoryCapacity) != string(CapacityMemory) {
		t.Errorf("draclaim asks DeviceClass %q capacity %q; the driver serves %q capacity %q",
			draclaim.DeviceClassName, draclaim.MemoryCapacity, DeviceClassName, CapacityMemory)
	}
}

// TestDRAViewReads: the root module's draview, which the extender's node
// choice and kubectl inspect gpushare read the driver's objects with,
// reads what List publishes (driver name, device name, index, UUID, model,
// isolation, capacity, unit from the request step, health from the taint)
// and reads a device's index back from its name, as it does for an
// allocation result.
func TestDRAViewReads(t *testing.T) {
	if draview.DriverName != DriverName || draview.DeviceClassName != DeviceClassName || string(draview.Memory) != string(CapacityMemory) {
		t.Fatalf("draview reads driver %q class %q capacity %q; the driver publishes %q, %q, %q",
			draview.DriverName, draview.DeviceClassName, draview.Memory, DriverName, DeviceClassName, CapacityMemory)
	}
	cards := []Card{
		{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "Tesla-T4", MemoryMiB: 16280}, CapacityMiB: 15360, Isolation: gpushare.IsolationMPS},
		{Card: gpushare.Card{Index: 1, UUID: "GPU-1", Model: "A100", MemoryMiB: 40960}, CapacityMiB: 40960, Isolation: gpushare.IsolationDriver},
	}
	for _, unit := range []string{gpushare.UnitGiB, gpushare.UnitMiB} {
		devs := List(cards, OrderLargestFirst, Info{Unit: unit, Unhealthy: map[string]bool{"GPU-0": true}})
		var got []draview.Card
		for i := range devs {
			c, ok := draview.ReadCard(&devs[i])
			if !ok {
				t.Fatalf("draview does not read device %s", devs[i].Name)
			}
			if idx, ok := draview.DeviceIndex(devs[i].Name); !ok || idx != c.Index {
				t.Errorf("device %s: index %d from its name (%t), %d from its attribute", devs[i].Name, idx, ok, c.Index)
			}
			got = append(got, c)
		}
		want := []draview.Card{
			{Card: gpushare.Card{Index: 1, UUID: "GPU-1", Model: "A100"}, Isolation: gpushare.IsolationDriver, Healthy: true, Bytes: 40960 << 20, Unit: unit},
			{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "Tesla-T4"}, Isolation: gpushare.IsolationMPS, Bytes: 15360 << 20, Unit: unit},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("unit %s: draview reads (-want +got):\n%s", unit, diff)
		}
	}
}
