package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// FakeDriver is what a fake node's driver supports (--fake-driver).
type FakeDriver struct {
	Driver
	// MPS: every card is Volta or newer and serves MPS clients.
	MPS bool
	// CgroupV1: the node runs cgroup v1 (the default fake node has v2).
	CgroupV1 bool
}

// ParseFakeDriver parses a --fake-driver value: the driver version, in
// digits MAJOR.MINOR or MAJOR.MINOR.PATCH, then optional comma-separated
// words. "mps" says the cards serve MPS clients; "cgroup-v1" says the node
// runs cgroup v1. The CUDA version is derived from the driver's major: 615
// and newer support CUDA 13.4 (13040), older ones CUDA 12.4 (12040).
// Examples: "615.00", "550.54.15,mps", "615.00,mps,cgroup-v1". An empty
// value is a node that states no driver.
func ParseFakeDriver(spec string) (FakeDriver, error) {
	if spec == "" {
		return FakeDriver{}, nil
	}
	parts := strings.Split(spec, ",")
	major, err := versionMajor(parts[0])
	if err != nil {
		return FakeDriver{}, fmt.Errorf("invalid --fake-driver %q: %w; want VERSION[,mps][,cgroup-v1], e.g. 615.00,mps", spec, err)
	}
	d := FakeDriver{Driver: Driver{Version: parts[0], CUDAVersion: 12040}}
	if major >= 615 {
		d.CUDAVersion = 13040
	}
	for _, w := range parts[1:] {
		switch w {
		case "mps":
			d.MPS = true
		case "cgroup-v1":
			d.CgroupV1 = true
		default:
			return FakeDriver{}, fmt.Errorf("invalid --fake-driver %q: unknown word %q; want VERSION[,mps][,cgroup-v1]", spec, w)
		}
	}
	return d, nil
}

// versionMajor checks that v is 2 or 3 dot-separated numbers and returns
// the first.
func versionMajor(v string) (int, error) {
	fields := strings.Split(v, ".")
	if len(fields) < 2 || len(fields) > 3 {
		return 0, fmt.Errorf("version %q is not MAJOR.MINOR[.PATCH]", v)
	}
	for _, f := range fields {
		if !allDigits(f) || len(f) > 6 {
			return 0, fmt.Errorf("version %q is not MAJOR.MINOR[.PATCH]", v)
		}
	}
	return strconv.Atoi(fields[0])
}
