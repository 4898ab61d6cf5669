package gpu

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Driver is what the node's NVIDIA driver says about itself.
type Driver struct {
	// Version is the driver's version, e.g. "550.54.15" or "615.00"; empty
	// when unknown (a fake node that states no driver).
	Version string
	// CUDAVersion is the newest CUDA the driver supports, as NVML encodes
	// it: 1000*major + 10*minor, e.g. 13040 for CUDA 13.4; 0 when unknown.
	CUDAVersion int
}

// ComputeMode is a card's compute mode (nvidia-smi -c).
type ComputeMode int32

// Compute modes, numbered as NVML numbers them.
const (
	ComputeDefault          ComputeMode = ComputeMode(nvml.COMPUTEMODE_DEFAULT)
	ComputeProhibited       ComputeMode = ComputeMode(nvml.COMPUTEMODE_PROHIBITED)
	ComputeExclusiveProcess ComputeMode = ComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS)
)

func (m ComputeMode) String() string {
	switch m {
	case ComputeDefault:
		return "Default"
	case ComputeProhibited:
		return "Prohibited"
	case ComputeExclusiveProcess:
		return "Exclusive_Process"
	}
	return fmt.Sprintf("ComputeMode(%d)", int(m))
}

// Features are what a card supports that memory isolation depends on.
type Features struct {
	// MIG is true when the card's current MIG mode is enabled.
	MIG bool
	// ComputeMode is the card's current compute mode.
	ComputeMode ComputeMode
	// MPS is true when the card can serve MPS clients with a pinned memory
	// limit: compute capability 7.0 (Volta) or newer.
	MPS bool
}

// mpsMinComputeMajor is the compute capability from which MPS enforces
// CUDA_MPS_PINNED_DEVICE_MEM_LIMIT (Volta, 7.0).
const mpsMinComputeMajor = 7

// ErrNoDriver marks a fake node that states no driver (--fake-driver unset).
var ErrNoDriver = errors.New("no NVIDIA driver")

// Driver reads the driver version (nvmlSystemGetDriverVersion) and the
// CUDA version it supports (nvmlSystemGetCudaDriverVersion).
func (n *NVML) Driver() (Driver, error) {
	v, ret := n.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return Driver{}, fmt.Errorf("reading the NVIDIA driver version: %w", ret)
	}
	cuda, ret := n.lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return Driver{}, fmt.Errorf("reading the CUDA driver version: %w", ret)
	}
	return Driver{Version: strings.TrimSpace(v), CUDAVersion: cuda}, nil
}

// Features reads the MIG mode, compute mode and compute capability of the
// card with this UUID. A card that does not support MIG has MIG false.
func (n *NVML) Features(uuid string) (Features, error) {
	d, ret := n.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return Features{}, fmt.Errorf("looking up GPU %s: %w", uuid, ret)
	}
	var f Features
	cur, _, ret := d.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		f.MIG = cur == nvml.DEVICE_MIG_ENABLE
	case nvml.ERROR_NOT_SUPPORTED:
	default:
		return Features{}, fmt.Errorf("reading the MIG mode of GPU %s: %w", uuid, ret)
	}
	cm, ret := d.GetComputeMode()
	if ret != nvml.SUCCESS {
		return Features{}, fmt.Errorf("reading the compute mode of GPU %s: %w", uuid, ret)
	}
	f.ComputeMode = ComputeMode(cm)
	major, _, ret := d.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return Features{}, fmt.Errorf("reading the compute capability of GPU %s: %w", uuid, ret)
	}
	f.MPS = major >= mpsMinComputeMajor
	return f, nil
}

// SetComputeMode sets the compute mode of the card with this UUID (MPS
// needs ComputeExclusiveProcess, so that only its server runs there).
func (n *NVML) SetComputeMode(uuid string, m ComputeMode) error {
	d, ret := n.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("looking up GPU %s: %w", uuid, ret)
	}
	if cur, ret := d.GetComputeMode(); ret == nvml.SUCCESS && ComputeMode(cur) == m {
		return nil // setting needs root; an operator may have set it already
	}
	if ret := d.SetComputeMode(nvml.ComputeMode(m)); ret != nvml.SUCCESS {
		return fmt.Errorf("setting the compute mode of GPU %s to %s: %w", uuid, m, ret)
	}
	return nil
}
