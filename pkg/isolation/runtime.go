package isolation

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// RuntimeCDI is the --runtime-cdi flag: whether the node's container
// runtime applies the CDI devices kubelet passes it. A container's Allocate
// response names its limit device there, so driver mode needs them. A
// runtime that ignores them runs the container without the NVIDIA hook, and
// so without the limit, while its environment says GPUSHARE_ISOLATION=driver.
type RuntimeCDI string

// The values of RuntimeCDI.
const (
	// RuntimeCDIAuto decides from the runtime's name and version, as the
	// Node reports it, by RuntimeAppliesCDI.
	RuntimeCDIAuto RuntimeCDI = "auto"
	// RuntimeCDIOn is the operator's word that the runtime applies CDI
	// devices, e.g. containerd 1.7 with enable_cdi = true.
	RuntimeCDIOn RuntimeCDI = "true"
	// RuntimeCDIOff: it does not.
	RuntimeCDIOff RuntimeCDI = "false"
)

// ParseRuntimeCDI checks a --runtime-cdi value.
func ParseRuntimeCDI(s string) (RuntimeCDI, error) {
	switch r := RuntimeCDI(s); r {
	case RuntimeCDIAuto, RuntimeCDIOn, RuntimeCDIOff:
		return r, nil
	}
	return "", fmt.Errorf("--runtime-cdi %q: want auto, true or false", s)
}

// ErrRuntimeNoCDI says the container runtime does not apply CDI devices.
var ErrRuntimeNoCDI = errors.New("the container runtime does not apply CDI devices")

// RuntimeAppliesCDI says whether a container runtime applies CDI devices
// as it is installed by default. version is a Node's
// status.nodeInfo.containerRuntimeVersion, e.g. "containerd://1.6.20" or
// "cri-o://1.30.2". It returns nil when the runtime does, else an
// ErrRuntimeNoCDI saying why and what to do.
//
//   - containerd 2.0 and newer: yes; enable_cdi defaults to true.
//   - containerd 1.7: no. It applies them only with enable_cdi = true in its
//     CRI configuration, off by default; an operator who turned it on says
//     --runtime-cdi=true.
//   - containerd before 1.7: no, it has no CDI support.
//   - CRI-O 1.23 and newer: yes.
//   - anything else, or no version: unknown, so no.
func RuntimeAppliesCDI(version string) error {
	name, ver, _ := strings.Cut(version, "://")
	major, minor, ok := majorMinor(ver)
	fix := "driver mode needs a runtime that applies CDI devices: containerd 2.x, containerd 1.7 with enable_cdi = true (then --runtime-cdi=true), or CRI-O 1.23+"
	switch {
	case !ok:
		return fmt.Errorf("%w: container runtime %q unknown; %s", ErrRuntimeNoCDI, version, fix)
	case name == "containerd" && major >= 2:
		return nil
	case name == "containerd" && major == 1 && minor == 7:
		return fmt.Errorf("%w: %s applies CDI devices only with enable_cdi = true in its CRI plugin's configuration, off by default; %s", ErrRuntimeNoCDI, version, fix)
	case name == "containerd":
		return fmt.Errorf("%w: %s ignores CDI devices (containerd < 1.7 has no CDI support); %s", ErrRuntimeNoCDI, version, fix)
	case name == "cri-o" && (major > 1 || major == 1 && minor >= 23):
		return nil
	}
	return fmt.Errorf("%w: container runtime %s not known to apply them; %s", ErrRuntimeNoCDI, version, fix)
}

// majorMinor reads "1.6.20~ds1" as 1, 6.
func majorMinor(v string) (major, minor int, ok bool) {
	v = strings.TrimPrefix(v, "v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	digits := func(s string) string {
		end := 0
		for end < len(s) && s[end] >= '0' && s[end] <= '9' {
			end++
		}
		return s[:end]
	}
	major, err1 := strconv.Atoi(digits(parts[0]))
	minor, err2 := strconv.Atoi(digits(parts[1]))
	return major, minor, err1 == nil && err2 == nil
}
