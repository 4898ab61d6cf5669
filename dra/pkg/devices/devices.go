package devices

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Names the driver publishes under.
const (
	// DriverName is the driver's name in ResourceSlices and allocation
	// results, and its kubelet plugin's name.
	DriverName = "gpu.gpushare.io"
	// DeviceClassName is the DeviceClass that selects the driver's devices.
	DeviceClassName = "gpu-mem.gpushare.io"
	// CapacityMemory is the devices' consumable capacity.
	CapacityMemory resourceapi.QualifiedName = "memory"
	// TaintUnhealthy is the key of the taint on the device of a card that a
	// critical XID made unhealthy.
	TaintUnhealthy = DriverName + "/unhealthy"
)

// Card is a card as the driver publishes and prepares it.
type Card struct {
	gpushare.Card
	// CapacityMiB is the memory the device publishes, in MiB: MemoryMiB
	// rounded down to the node's unit, as CapacityMiB computes it.
	CapacityMiB int64
	// Isolation is the card's memory isolation mode.
	Isolation gpushare.Isolation
	// MIG is true when the card's MIG mode is on.
	MIG bool
}

// DeviceName is the card's device name in the slice: gpu-<index>.
func (c *Card) DeviceName() string { return "gpu-" + strconv.Itoa(c.Index) }

// UnitMiB is one unit in MiB: 1024 for gpushare.UnitGiB, 1 for
// gpushare.UnitMiB.
func UnitMiB(unit string) int64 {
	if unit == gpushare.UnitMiB {
		return 1
	}
	return 1024
}

// CapacityMiB rounds memMiB down to whole units of unit: 16,280 MiB is
// 15,360 MiB in GiB and all 16,280 in MiB.
func CapacityMiB(memMiB int64, unit string) int64 {
	step := UnitMiB(unit)
	return memMiB / step * step
}

// Features reads a card's MIG mode; gpu.NVML and gpu.Fake implement it.
type Features interface {
	Features(uuid string) (gpu.Features, error)
}

// CardsOf converts discovered devices to cards in unit. It reads each
// card's MIG mode from f; a card whose features cannot be read keeps the
// device's. It fails on no cards, and on a card smaller than two units: the
// request policy's smallest request plus one step must fit.
func CardsOf(node string, devs []gpu.Device, unit string, f Features) ([]Card, error) {
	if len(devs) == 0 {
		return nil, fmt.Errorf("no GPUs found on node %s", node)
	}
	cards := make([]Card, 0, len(devs))
	for _, d := range devs {
		capMiB := CapacityMiB(d.MemoryMiB, unit)
		if capMiB < 2*UnitMiB(unit) {
			return nil, fmt.Errorf("GPU %d (%s) on node %s has %d MiB, less than two %s; use --memory-unit %s", d.Index, d.UUID, node, d.MemoryMiB, unit, gpushare.UnitMiB)
		}
		mig := d.MIG
		if feat, err := f.Features(d.UUID); err == nil {
			mig = mig || feat.MIG
		}
		cards = append(cards, Card{Card: d.Card, CapacityMiB: capMiB, MIG: mig})
	}
	return cards, nil
}

// Order is the order of a node's devices in its ResourceSlice. Inside a
// node kube-scheduler takes the first device with room, in slice order, so
// the order is the driver's only lever against fragmentation.
type Order string

// Orders.
const (
	// OrderIndex lists cards by NVML index.
	OrderIndex Order = "index"
	// OrderSmallestFirst lists the cards with the least memory first, ties
	// by index. Small requests fill small cards, and large cards stay free
	// for large requests.
	OrderSmallestFirst Order = "smallest-first"
	// OrderLargestFirst lists the cards with the most memory first.
	OrderLargestFirst Order = "largest-first"
)

// Orders lists the values of --device-order, the default first.
var Orders = []Order{OrderIndex, OrderSmallestFirst, OrderLargestFirst}

// DefaultOrder is the default --device-order. On a node of equal cards
// every order is index order.
const DefaultOrder = OrderIndex

// ParseOrder checks a --device-order value.
func ParseOrder(s string) (Order, error) {
	for _, o := range Orders {
		if string(o) == s {
			return o, nil
		}
	}
	names := make([]string, len(Orders))
	for i, o := range Orders {
		names[i] = string(o)
	}
	return "", fmt.Errorf("--device-order %q: want one of %s", s, strings.Join(names, ", "))
}

// Sort orders cards in place by o.
func (o Order) Sort(cards []Card) {
	slices.SortStableFunc(cards, func(a, b Card) int {
		switch o {
		case OrderSmallestFirst:
			if c := cmp.Compare(a.CapacityMiB, b.CapacityMiB); c != 0 {
				return c
			}
		case OrderLargestFirst:
			if c := cmp.Compare(b.CapacityMiB, a.CapacityMiB); c != 0 {
				return c
			}
		}
		return cmp.Compare(a.Index, b.Index)
	})
}

// Info is what the devices publish besides their cards.
type Info struct {
	// DriverVersion is the NVIDIA driver's version; "" when unknown.
	DriverVersion string
	// Unit is the node's unit (gpushare.UnitGiB or gpushare.UnitMiB).
	Unit string
	// Unhealthy: UUID -> true for the cards whose devices are tainted.
	Unhealthy map[string]bool
	// Held: UUID -> MiB that pods outside DRA still hold on the card, taken
	// off the capacity it publishes. They are the device plugin's pods, on a
	// node that moved from it.
	Held map[string]int64
}

// Published is the memory, in MiB, that card c publishes beside held MiB
// of pods outside DRA: its capacity less held, rounded down to whole units.
// It is 0 when less than two units are left, as in CardsOf. A 16 GiB card in
// GiB beside a 12 GiB pod publishes 4 GiB; beside 4.5 GiB, 11 GiB; beside
// 15 GiB, nothing.
func Published(c Card, held int64, unit string) int64 {
	mib := CapacityMiB(c.CapacityMiB-max(held, 0), unit)
	if mib < 2*UnitMiB(unit) {
		return 0
	}
	return mib
}

// List returns the ResourceSlice devices of cards, in order o, as the
// package doc's example shows. Capacity memory is Published's, and a card
// with nothing published is not listed. The request policy's default is the
// whole capacity; its valid range starts at one unit and steps by one.
// Multiple allocations are allowed. The attributes are index, uuid, model,
// isolation, mig and driverVersion when known. An unhealthy card's device
// carries the NoSchedule taint TaintUnhealthy.
func List(cards []Card, o Order, info Info) []resourceapi.Device {
	sorted := slices.Clone(cards)
	o.Sort(sorted)
	step := resource.NewQuantity(UnitMiB(info.Unit)<<20, resource.BinarySI)
	out := make([]resourceapi.Device, 0, len(sorted))
	for _, c := range sorted {
		mib := Published(c, info.Held[c.UUID], info.Unit)
		if mib == 0 {
			continue
		}
		total := resource.NewQuantity(mib<<20, resource.BinarySI)
		d := resourceapi.Device{
			Name: c.DeviceName(),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index":     {IntValue: ptr.To(int64(c.Index))},
				"uuid":      {StringValue: ptr.To(c.UUID)},
				"model":     {StringValue: ptr.To(c.Model)},
				"isolation": {StringValue: ptr.To(string(c.Isolation))},
				"mig":       {BoolValue: ptr.To(c.MIG)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				CapacityMemory: {
					Value: *total,
					RequestPolicy: &resourceapi.CapacityRequestPolicy{
						Default:    total,
						ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: step, Step: step},
					},
				},
			},
			AllowMultipleAllocations: ptr.To(true),
		}
		if info.DriverVersion != "" {
			d.Attributes["driverVersion"] = resourceapi.DeviceAttribute{StringValue: ptr.To(info.DriverVersion)}
		}
		if info.Unhealthy[c.UUID] {
			d.Taints = []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: "xid", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
		}
		out = append(out, d)
	}
	return out
}

// DeviceClass is the DeviceClass that claims name to get GPU memory from
// this driver: every device of driver gpu.gpushare.io.
func DeviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: DeviceClassName},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + DriverName + `"`}}},
		},
	}
}
