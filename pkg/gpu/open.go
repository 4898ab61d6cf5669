package gpu

import (
	"context"
	"fmt"
)

// GPUs is what the device plugin and the DRA driver need from a node's
// cards (NVML, Fake).
type GPUs interface {
	Devices() ([]Device, error)
	WatchXIDs(ctx context.Context, out chan<- Event) error
	Probe(uuid string) error
	// Driver, Features and SetComputeMode serve memory isolation.
	Driver() (Driver, error)
	Features(uuid string) (Features, error)
	SetComputeMode(uuid string, m ComputeMode) error
}

var (
	_ GPUs = (*NVML)(nil)
	_ GPUs = (*Fake)(nil)
)

// Open returns the node's cards and a function that releases them: fakes
// (OpenFake, UUIDs seeded by seed) when fakeSpec is set, else NVML.
func Open(fakeSpec, fakeDriver, seed string) (GPUs, func(), error) {
	if fakeSpec != "" {
		f, err := OpenFake(fakeSpec, fakeDriver, seed)
		if err != nil {
			return nil, nil, err
		}
		return f, func() {}, nil
	}
	n, err := OpenNVML(nil)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (use --fake-gpus on a machine without NVIDIA GPUs)", err)
	}
	return n, func() { _ = n.Close() }, nil
}
