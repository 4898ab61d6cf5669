package gpushare

import (
	"fmt"
	"strconv"
	"strings"
)

// Container environment that a container with a share of GPU memory gets,
// from the device plugin's Allocate or the DRA driver's CDI device alike.
// AnnotationIndex, AnnotationPodMem and AnnotationDevMem are environment
// variables too.
const (
	// EnvVisibleDevices lists the container's cards by UUID for the
	// NVIDIA container toolkit.
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// EnvContainerMem is the container's units (all its cards together).
	EnvContainerMem = "ALIYUN_COM_GPU_MEM_CONTAINER"
	// EnvMPSLimit is the per-device memory limit an MPS server enforces:
	// "0=8G" (GiB) or "0=8192M" (MiB), one entry per visible device.
	EnvMPSLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// EnvShare is a container's part of one card, in the node's unit.
type EnvShare struct {
	UUID  string
	Index int
	// Units of the card's memory the container holds.
	Units int64
}

// ContainerEnv returns the environment of a container holding shares in
// unit, at least one, in its card order. podUnits is the pod's total, the
// claim's under DRA; devUnits is the first card's whole memory.
//
// Example: 8 GiB of card 1 (16 GiB) and 4 GiB of card 3, pod total 12,
// gives NVIDIA_VISIBLE_DEVICES=<uuid1>,<uuid3>, ALIYUN_COM_GPU_MEM_IDX=1,3,
// ALIYUN_COM_GPU_MEM_CONTAINER=12, ALIYUN_COM_GPU_MEM_POD=12,
// ALIYUN_COM_GPU_MEM_DEV=16 and CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G,1=4G.
func ContainerEnv(shares []EnvShare, podUnits, devUnits int64, unit string) map[string]string {
	suffix := "G"
	if unit == UnitMiB {
		suffix = "M"
	}
	uuids := make([]string, len(shares))
	idx := make([]string, len(shares))
	limits := make([]string, len(shares))
	var total int64
	for i, sh := range shares {
		uuids[i] = sh.UUID
		idx[i] = strconv.Itoa(sh.Index)
		limits[i] = fmt.Sprintf("%d=%d%s", i, sh.Units, suffix)
		total += sh.Units
	}
	return map[string]string{
		AnnotationIndex:   strings.Join(idx, ","),
		AnnotationPodMem:  strconv.FormatInt(podUnits, 10),
		EnvContainerMem:   strconv.FormatInt(total, 10),
		AnnotationDevMem:  strconv.FormatInt(devUnits, 10),
		EnvMPSLimit:       strings.Join(limits, ","),
		EnvVisibleDevices: strings.Join(uuids, ","),
	}
}
