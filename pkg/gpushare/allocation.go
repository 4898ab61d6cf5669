package gpushare

import (
	"encoding/json"
	"fmt"
)

// Allocation is the pod annotation AnnotationAllocation: where each GPU
// container of the pod runs. Example, a pod whose init container takes 8 GiB
// on card 1 and whose two app containers take 4 GiB each on cards 1 and 3:
//
//	{"node":"gpu-a","unit":"GiB","containers":[
//	  {"name":"prep","init":true,"devices":[{"index":1,"uuid":"GPU-b","units":8}]},
//	  {"name":"train","devices":[{"index":1,"uuid":"GPU-b","units":4}]},
//	  {"name":"serve","devices":[{"index":3,"uuid":"GPU-d","units":4}]}]}
//
// Containers that ask for no GPU memory are absent.
type Allocation struct {
	// Node the pod was bound to.
	Node string `json:"node"`
	// Unit of every Units below: the node's unit.
	Unit string `json:"unit"`
	// Containers in pod spec order, init containers first.
	Containers []ContainerAllocation `json:"containers"`
}

// ContainerAllocation is one container's share.
type ContainerAllocation struct {
	Name string `json:"name"`
	// Init is true for an init container that runs to completion before the
	// app containers. A restartable ("sidecar") init container runs beside
	// them and counts as an app container.
	Init bool `json:"init,omitempty"`
	// Devices the container's memory is on; more than one only when the
	// container asked aliyun.com/gpu-count > 1.
	Devices []DeviceShare `json:"devices"`
}

// DeviceShare is a slice of one card.
type DeviceShare struct {
	// Index is the card's index on the node.
	Index int `json:"index"`
	// UUID is the card's UUID, empty when the node published no inventory.
	UUID string `json:"uuid,omitempty"`
	// Units of memory on this card.
	Units int64 `json:"units"`
}

// ParseAllocation decodes and validates an AnnotationAllocation value.
func ParseAllocation(s string) (*Allocation, error) {
	if len(s) > MaxAnnotationBytes {
		return nil, fmt.Errorf("%w: allocation is %d bytes, limit %d", ErrInvalid, len(s), MaxAnnotationBytes)
	}
	var a Allocation
	if err := json.Unmarshal([]byte(s), &a); err != nil {
		return nil, fmt.Errorf("%w: decoding allocation: %w", ErrInvalid, err)
	}
	if err := a.Validate(); err != nil {
		return nil, err
	}
	return &a, nil
}

// Validate checks that the allocation names a node and a unit, UnitGiB or
// UnitMiB. Every share must be positive, on a non-negative card index, each
// card at most once per container. A share holds at most MaxShareUnits, so
// PerCard and Total cannot overflow: a pod's annotations, 256 KiB at most,
// hold fewer than 2¹⁸ shares.
func (a *Allocation) Validate() error {
	if a.Node == "" {
		return fmt.Errorf("%w: allocation names no node", ErrInvalid)
	}
	if a.Unit != UnitGiB && a.Unit != UnitMiB {
		return fmt.Errorf("%w: allocation unit %q, want %q or %q", ErrInvalid, a.Unit, UnitGiB, UnitMiB)
	}
	for _, c := range a.Containers {
		if c.Name == "" {
			return fmt.Errorf("%w: allocation has a container without a name", ErrInvalid)
		}
		if len(c.Devices) == 0 {
			return fmt.Errorf("%w: container %q has no devices", ErrInvalid, c.Name)
		}
		seen := map[int]bool{}
		for _, d := range c.Devices {
			if d.Index < 0 || d.Units <= 0 || d.Units > MaxShareUnits {
				return fmt.Errorf("%w: container %q has share %d units on card %d", ErrInvalid, c.Name, d.Units, d.Index)
			}
			if seen[d.Index] {
				return fmt.Errorf("%w: container %q uses card %d twice", ErrInvalid, c.Name, d.Index)
			}
			seen[d.Index] = true
		}
	}
	return nil
}

// MaxShareUnits bounds one share of an allocation: 2⁴⁰ units, an exbibyte
// in MiB, more than any card holds.
const MaxShareUnits = 1 << 40

// Encode returns the annotation value.
func (a *Allocation) Encode() (string, error) {
	b, err := json.Marshal(a)
	if err != nil {
		return "", fmt.Errorf("encoding allocation: %w", err)
	}
	return string(b), nil
}

// PerCard returns the units the pod holds on each card index, by
// Demand.Total's rule applied card by card. A card holds the larger of two
// amounts: what the app containers and sidecars take there, and, for each
// plain init container on it, what that one takes plus the sidecars declared
// before it there. Containers are in spec order, init containers first, so a
// non-init container before an init container is a sidecar.
// Examples: init 8 on card 1, app 4 on card 1 and 4 on card 3 → {1: 8, 3: 4};
// sidecar 4, then init 8, then app 2, all on card 0 → {0: 12}.
func (a *Allocation) PerCard() map[int]int64 {
	running := map[int]int64{} // non-init units so far
	initMax := map[int]int64{}
	for _, c := range a.Containers {
		for _, d := range c.Devices {
			if c.Init {
				initMax[d.Index] = max(initMax[d.Index], running[d.Index]+d.Units)
			} else {
				running[d.Index] += d.Units
			}
		}
	}
	for idx, u := range initMax {
		running[idx] = max(running[idx], u)
	}
	return running
}

// Total returns the sum of PerCard: the units the pod holds on its node.
func (a *Allocation) Total() int64 {
	var t int64
	for _, u := range a.PerCard() {
		t += u
	}
	return t
}

// FirstAppDevice returns the first card share of the first app container,
// or of the first container when the pod has only init containers. It is the
// card the Aliyun annotations AnnotationIndex and AnnotationDevMem describe.
// ok is false for an allocation without containers or devices. Example: the
// Allocation example above gives card 1, train's share.
func (a *Allocation) FirstAppDevice() (d DeviceShare, ok bool) {
	if len(a.Containers) == 0 {
		return DeviceShare{}, false
	}
	first := a.Containers[0]
	for _, c := range a.Containers {
		if !c.Init {
			first = c
			break
		}
	}
	if len(first.Devices) == 0 {
		return DeviceShare{}, false
	}
	return first.Devices[0], true
}

// CheckDemand reports whether the allocation gives each container of d
// exactly what it asks: the same containers in the same order, Init alike,
// with Cards shares of Units each. Both must be in the same unit.
func (a *Allocation) CheckDemand(d Demand) error {
	if len(a.Containers) != len(d) {
		return fmt.Errorf("allocation names %d containers; the pod has %d asking %s", len(a.Containers), len(d), ResourceGPUMem)
	}
	for i, c := range a.Containers {
		want := d[i]
		if c.Name != want.Name || c.Init != want.Init {
			return fmt.Errorf("allocation's container %d is %s; the pod's is %s", i, describeContainer(c.Name, c.Init), describeContainer(want.Name, want.Init))
		}
		if len(c.Devices) != want.Cards {
			return fmt.Errorf("allocation gives container %s %d cards; it asks %d", c.Name, len(c.Devices), want.Cards)
		}
		for _, sh := range c.Devices {
			if sh.Units != want.Units {
				return fmt.Errorf("allocation gives container %s %d %s on card %d; it asks %d", c.Name, sh.Units, a.Unit, sh.Index, want.Units)
			}
		}
	}
	return nil
}

func describeContainer(name string, init bool) string {
	if init {
		return "init container " + name
	}
	return "container " + name
}

// InUnit returns the allocation with every share in unit: the allocation
// itself when it is in unit already, else a copy. GiB to MiB multiplies by
// 1024. MiB to GiB divides, rounding up, so a share never shrinks: 1500 MiB
// is 2 GiB.
func (a *Allocation) InUnit(unit string) (*Allocation, error) {
	if a.Unit == unit {
		return a, nil
	}
	var conv func(int64) int64
	switch {
	case a.Unit == UnitGiB && unit == UnitMiB:
		conv = func(u int64) int64 { return u * 1024 }
	case a.Unit == UnitMiB && unit == UnitGiB:
		conv = func(u int64) int64 { return (u + 1023) / 1024 }
	default:
		return nil, fmt.Errorf("%w: cannot convert an allocation in %q to %q", ErrInvalid, a.Unit, unit)
	}
	out := *a
	out.Unit = unit
	out.Containers = make([]ContainerAllocation, len(a.Containers))
	for i, c := range a.Containers {
		c.Devices = append([]DeviceShare(nil), c.Devices...)
		for j := range c.Devices {
			c.Devices[j].Units = conv(c.Devices[j].Units)
		}
		out.Containers[i] = c
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("converting the allocation to %s: %w", unit, err)
	}
	return &out, nil
}
