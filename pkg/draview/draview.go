package draview

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"

	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

const (
	// DriverName is the driver's name in ResourceSlices and allocation
	// results.
	DriverName = "gpu.gpushare.io"
	// Memory is its devices' consumable capacity, in bytes.
	Memory = draclaim.MemoryCapacity
	// DeviceClassName is the DeviceClass of the driver's cards.
	DeviceClassName = draclaim.DeviceClassName
	// devicePrefix starts every device name; the card's index follows.
	devicePrefix = "gpu-"
)

// Card is one device of the driver.
type Card struct {
	// Card is the card's index on its node, UUID and model. MemoryMiB is 0:
	// a slice publishes the capacity (Bytes), not the card's memory.
	gpushare.Card
	// Isolation is the attribute isolation, gpushare.IsolationNone when
	// absent.
	Isolation gpushare.Isolation
	// Healthy: the device carries no NoSchedule or NoExecute taint.
	Healthy bool
	// Bytes is the device's memory capacity.
	Bytes int64
	// Unit is the node's unit: gpushare.UnitMiB when the capacity's
	// request step is 1 MiB, else gpushare.UnitGiB.
	Unit string
}

// ReadCard reads one device; ok is false for a device without memory
// capacity.
func ReadCard(d *resourcev1.Device) (c Card, ok bool) {
	mem, ok := d.Capacity[Memory]
	if !ok {
		return Card{}, false
	}
	c = Card{Healthy: true, Isolation: gpushare.IsolationNone, Bytes: mem.Value.Value(), Unit: gpushare.UnitGiB}
	if p := mem.RequestPolicy; p != nil && p.ValidRange != nil && p.ValidRange.Step != nil && p.ValidRange.Step.Value() == 1<<20 {
		c.Unit = gpushare.UnitMiB
	}
	if a, ok := d.Attributes["index"]; ok && a.IntValue != nil {
		c.Index = int(*a.IntValue)
	} else if i, ok := DeviceIndex(d.Name); ok {
		c.Index = i
	}
	if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
		c.UUID = *a.StringValue
	}
	if a, ok := d.Attributes["model"]; ok && a.StringValue != nil {
		c.Model = *a.StringValue
	}
	if a, ok := d.Attributes["isolation"]; ok && a.StringValue != nil && *a.StringValue != "" {
		c.Isolation = gpushare.Isolation(*a.StringValue)
	}
	for _, t := range d.Taints {
		if t.Effect == resourcev1.DeviceTaintEffectNoSchedule || t.Effect == resourcev1.DeviceTaintEffectNoExecute {
			c.Healthy = false
		}
	}
	return c, true
}

// DeviceIndex reads the card index of a device name, gpu-<index>.
func DeviceIndex(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, devicePrefix)
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0
}

// NodeCards returns the cards the driver publishes for node among slices;
// slices of other drivers or nodes are skipped. It takes those of the
// newest generation of the node's pools, in the order kube-scheduler
// tries them: slices by name, then devices in slice order.
func NodeCards(node string, list []*resourcev1.ResourceSlice) []Card {
	newest := map[string]int64{} // pool -> newest generation
	var mine []*resourcev1.ResourceSlice
	for _, s := range list {
		if s.Spec.Driver != DriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != node {
			continue
		}
		mine = append(mine, s)
		if g, ok := newest[s.Spec.Pool.Name]; !ok || s.Spec.Pool.Generation > g {
			newest[s.Spec.Pool.Name] = s.Spec.Pool.Generation
		}
	}
	slices.SortFunc(mine, func(a, b *resourcev1.ResourceSlice) int { return cmp.Compare(a.Name, b.Name) })
	var cards []Card
	for _, s := range mine {
		if s.Spec.Pool.Generation != newest[s.Spec.Pool.Name] {
			continue
		}
		for i := range s.Spec.Devices {
			if c, ok := ReadCard(&s.Spec.Devices[i]); ok {
				cards = append(cards, c)
			}
		}
	}
	return cards
}

// Share is what one allocation result of the driver holds.
type Share struct {
	// Pool and Device name the device; the pool is its node.
	Pool, Device string
	// Bytes is the memory consumed. It is 0 when the result carries no
	// consumed capacity: the whole card.
	Bytes int64
}

// Shares returns the driver's results of claim's allocation, nil when it
// is not allocated.
func Shares(claim *resourcev1.ResourceClaim) []Share {
	if claim.Status.Allocation == nil {
		return nil
	}
	var out []Share
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		s := Share{Pool: r.Pool, Device: r.Device}
		if q, ok := r.ConsumedCapacity[Memory]; ok {
			s.Bytes = q.Value()
		}
		out = append(out, s)
	}
	return out
}

// RequestBytes returns the memory claim asks of one card of the driver's
// DeviceClass (draclaim.DeviceClassName). That is its one request for
// exactly one device of that class with capacity memory. ok is false for
// any other shape: no such request, several of them, a count above one,
// another allocation mode, or no memory asked.
func RequestBytes(spec *resourcev1.ResourceClaimSpec) (bytes int64, ok bool) {
	found := false
	for _, r := range spec.Devices.Requests {
		e := r.Exactly
		if e == nil || e.DeviceClassName != draclaim.DeviceClassName {
			continue
		}
		if found || e.AllocationMode == resourcev1.DeviceAllocationModeAll || e.Count > 1 || e.Capacity == nil {
			return 0, false
		}
		q, has := e.Capacity.Requests[Memory]
		if !has || q.Value() <= 0 {
			return 0, false
		}
		bytes, found = q.Value(), true
	}
	return bytes, found
}

// UnitBytes is the bytes of a unit (gpushare.UnitGiB or UnitMiB).
func UnitBytes(unit string) int64 {
	if unit == gpushare.UnitMiB {
		return 1 << 20
	}
	return 1 << 30
}

// Units is bytes in units of unit, rounded up: what a request of bytes
// takes of a card counted in that unit.
func Units(bytes int64, unit string) int64 {
	size := UnitBytes(unit)
	return (bytes + size - 1) / size
}
