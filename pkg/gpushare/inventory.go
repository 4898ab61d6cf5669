package gpushare

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MaxAnnotationBytes bounds the JSON annotations we decode, so that a corrupt
// or hostile one cannot make a component allocate without bound.
const MaxAnnotationBytes = 64 << 10

// ErrInvalid marks annotation contents that do not follow the contract.
var ErrInvalid = errors.New("invalid gpushare annotation")

// Inventory is the node annotation AnnotationInventory, for example
//
//	{"unit":"GiB","devices":[
//	  {"index":0,"uuid":"GPU-8f1c...","model":"Tesla T4","memory":16,"healthy":true,"isolation":"mps"},
//	  {"index":1,"uuid":"GPU-2a7e...","model":"A100-SXM4-80GB","memory":80,"healthy":false}]}
type Inventory struct {
	// Unit of every Memory below and of the node's aliyun.com/gpu-mem
	// capacity: UnitGiB or UnitMiB.
	Unit string `json:"unit"`
	// Devices, one per physical card, in index order.
	Devices []Device `json:"devices"`
}

// Device is one card of a node.
type Device struct {
	// Index is the card's NVML index on the node (0-based).
	Index int `json:"index"`
	// UUID is the card's NVML UUID ("GPU-..."); empty when unknown.
	UUID string `json:"uuid,omitempty"`
	// Model is the product name, e.g. "Tesla T4".
	Model string `json:"model,omitempty"`
	// Memory is the card's total memory in Inventory.Unit.
	Memory int64 `json:"memory"`
	// Healthy is false while the card must not receive new pods.
	Healthy bool `json:"healthy"`
	// Isolation is how the card enforces each container's share. Empty, in
	// an inventory from before isolation, means IsolationNone.
	Isolation Isolation `json:"isolation,omitempty"`
}

// Mode returns d's isolation, IsolationNone when the field is absent.
func (d *Device) Mode() Isolation {
	if d.Isolation == "" {
		return IsolationNone
	}
	return d.Isolation
}

// ParseInventory decodes and validates an AnnotationInventory value.
func ParseInventory(s string) (*Inventory, error) {
	if len(s) > MaxAnnotationBytes {
		return nil, fmt.Errorf("%w: inventory is %d bytes, limit %d", ErrInvalid, len(s), MaxAnnotationBytes)
	}
	var inv Inventory
	if err := json.Unmarshal([]byte(s), &inv); err != nil {
		return nil, fmt.Errorf("%w: decoding inventory: %w", ErrInvalid, err)
	}
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	return &inv, nil
}

// Validate checks the unit, that indexes are unique and non-negative, that
// UUIDs are unique, that memory is positive and that isolation is a known
// mode or absent.
func (inv *Inventory) Validate() error {
	if inv.Unit != UnitGiB && inv.Unit != UnitMiB {
		return fmt.Errorf("%w: inventory unit %q, want %q or %q", ErrInvalid, inv.Unit, UnitGiB, UnitMiB)
	}
	seenIdx := make(map[int]bool, len(inv.Devices))
	seenUUID := make(map[string]bool, len(inv.Devices))
	for _, d := range inv.Devices {
		switch {
		case d.Index < 0:
			return fmt.Errorf("%w: device index %d is negative", ErrInvalid, d.Index)
		case seenIdx[d.Index]:
			return fmt.Errorf("%w: device index %d appears twice", ErrInvalid, d.Index)
		case d.Memory <= 0:
			return fmt.Errorf("%w: device %d has memory %d, want > 0", ErrInvalid, d.Index, d.Memory)
		case d.UUID != "" && seenUUID[d.UUID]:
			return fmt.Errorf("%w: device UUID %s appears twice", ErrInvalid, d.UUID)
		case strings.ContainsAny(d.UUID, " ,\n"):
			return fmt.Errorf("%w: device %d UUID %q has a space or comma", ErrInvalid, d.Index, d.UUID)
		}
		if err := validIsolation(d.Isolation); err != nil {
			return fmt.Errorf("device %d: %w", d.Index, err)
		}
		seenIdx[d.Index] = true
		if d.UUID != "" {
			seenUUID[d.UUID] = true
		}
	}
	return nil
}

// Encode returns the annotation value.
func (inv *Inventory) Encode() (string, error) {
	b, err := json.Marshal(inv)
	if err != nil {
		return "", fmt.Errorf("encoding inventory: %w", err)
	}
	return string(b), nil
}
