package isolation

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/yaml"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDI names and defaults of driver mode.
const (
	// CDIKind is the kind of the devices in the spec the plugin writes: a
	// container's limit device is CDIKind=<name>, named by limitDeviceName.
	CDIKind = "gpushare.io/gpu-mem"
	// DefaultCDIDir is where CDI-enabled runtimes read specs from.
	DefaultCDIDir = "/var/run/cdi"
	// CDISpecFile is the spec's file name in the CDI directory.
	CDISpecFile = "gpushare.io-gpu-mem.yaml"
	// DefaultCDIHook is the NVIDIA container toolkit's CDI hook binary.
	DefaultCDIHook = "/usr/bin/nvidia-cdi-hook"
	// cdiHookCommand is the hook's subcommand that applies
	// NVIDIA_GPU_MEMORY_REQUEST and NVIDIA_GPU_MEMORY_LIMIT, in MiB, to the
	// container's cgroup.
	cdiHookCommand = "apply-cuda-memory-limits"
	// maxCDIDevices bounds the limit devices the spec keeps, one per
	// distinct set of cards and shares handed out.
	maxCDIDevices = 4096
)

// Environment the driver-mode CDI device sets; the toolkit's hook reads it.
const (
	EnvMemoryRequest = "NVIDIA_GPU_MEMORY_REQUEST"
	EnvMemoryLimit   = "NVIDIA_GPU_MEMORY_LIMIT"
)

// CDISpec is the CDI spec file of driver mode. It holds one device per
// distinct container limit handed out. A container with 8192 MiB on card 2
// gets the device "gpushare.io/gpu-mem=2-8192". Its edits run the toolkit's
// hook, createContainer: nvidia-cdi-hook apply-cuda-memory-limits, with
// NVIDIA_GPU_MEMORY_REQUEST and NVIDIA_GPU_MEMORY_LIMIT=8192. Devices are
// kept while a container holds them, across restarts too, so a container
// that kubelet restarts still resolves its device. Retain drops the others.
// Every version written is validated with the CDI project's own library
// first.
type CDISpec struct {
	path     string
	hookPath string

	// now is the clock: time.Now, or a test's.
	now func() time.Time

	mu sync.Mutex
	// devices: device name -> device, everything the file holds.
	devices map[string]cdispec.Device
	// whole: the names of the whole-card devices, never pruned.
	whole map[string]bool
	// added: device name -> when this process added it or found it in the
	// file. Retain keeps devices younger than its minAge.
	added map[string]time.Time
}

// NewCDISpec returns the spec at dir/CDISpecFile, keeping the devices of a
// valid spec already there. It writes it with a device for the whole of each
// card in wholeMiB, card index -> MiB, so the spec is never empty.
func NewCDISpec(dir, hookPath string, wholeMiB map[int]int64) (*CDISpec, error) {
	s := &CDISpec{path: filepath.Join(dir, CDISpecFile), hookPath: hookPath, now: time.Now,
		devices: map[string]cdispec.Device{}, whole: map[string]bool{}, added: map[string]time.Time{}}
	// A spec that is missing or unreadable starts afresh.
	if old, err := cdi.ReadSpec(s.path, 0); err == nil && old.Kind == CDIKind {
		for _, d := range old.Devices {
			s.devices[d.Name] = d
			s.added[d.Name] = s.now()
		}
	}
	for idx, mib := range wholeMiB {
		l := []Limit{{Index: idx, MiB: mib}}
		s.add(l)
		s.whole[limitDeviceName(l)] = true
	}
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // runtimes read CDI specs
		return nil, fmt.Errorf("creating the CDI directory %s: %w", dir, err)
	}
	if err := s.write(); err != nil {
		return nil, err
	}
	return s, nil
}

// Path returns the spec file's path.
func (s *CDISpec) Path() string { return s.path }

// Limit is one card's limit for a container.
type Limit struct {
	// Index of the card on the node.
	Index int
	// MiB the container may use on it.
	MiB int64
}

// Device returns the qualified CDI name of the device for limits, in the
// container's card order. It adds a new device to the spec file first.
func (s *CDISpec) Device(limits []Limit) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := limitDeviceName(limits)
	if _, ok := s.devices[name]; !ok {
		if len(s.devices) >= maxCDIDevices {
			return "", fmt.Errorf("adding CDI device %s: the spec %s already holds %d devices", name, s.path, maxCDIDevices)
		}
		s.add(limits)
		if err := s.write(); err != nil {
			delete(s.devices, name)
			delete(s.added, name)
			return "", err
		}
	}
	return CDIKind + "=" + name, nil
}

// Retain drops the limit devices that none of held names; each of held is a
// container's limits, in its card order. It spares the whole-card devices
// and those added less than minAge ago: an Allocate may be adding one for a
// container not yet among held. It rewrites the file if it dropped any, and
// returns how many. A container kubelet restarts resolves its device again,
// so held must include every container that still exists, not only running
// ones.
func (s *CDISpec) Retain(held [][]Limit, minAge time.Duration) (int, error) {
	keep := make(map[string]bool, len(held))
	for _, l := range held {
		keep[limitDeviceName(l)] = true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cutoff := s.now().Add(-minAge)
	dropped := map[string]cdispec.Device{}
	for name, d := range s.devices {
		if keep[name] || s.whole[name] || s.added[name].After(cutoff) {
			continue
		}
		dropped[name] = d
		delete(s.devices, name)
	}
	if len(dropped) == 0 {
		return 0, nil
	}
	if err := s.write(); err != nil {
		maps.Copy(s.devices, dropped)
		return 0, err
	}
	for name := range dropped {
		delete(s.added, name)
	}
	return len(dropped), nil
}

// limitDeviceName names the device of limits: "<index>-<MiB>" per card,
// joined by "_": "0-4096_1-4096".
func limitDeviceName(limits []Limit) string {
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = strconv.Itoa(l.Index) + "-" + strconv.FormatInt(l.MiB, 10)
	}
	return strings.Join(parts, "_")
}

// limitValue is the hook's value for limits: the MiB of one card, or of
// each card in the container's order separated by commas.
func limitValue(limits []Limit) string {
	parts := make([]string, len(limits))
	for i, l := range limits {
		parts[i] = strconv.FormatInt(l.MiB, 10)
	}
	return strings.Join(parts, ",")
}

// add puts the device of limits in s.devices. The caller holds s.mu or
// owns s.
func (s *CDISpec) add(limits []Limit) {
	v := limitValue(limits)
	s.added[limitDeviceName(limits)] = s.now()
	s.devices[limitDeviceName(limits)] = cdispec.Device{
		Name: limitDeviceName(limits),
		ContainerEdits: cdispec.ContainerEdits{
			Env: []string{EnvMemoryRequest + "=" + v, EnvMemoryLimit + "=" + v},
			Hooks: []*cdispec.Hook{{
				HookName: "createContainer",
				Path:     s.hookPath,
				Args:     []string{filepath.Base(s.hookPath), cdiHookCommand},
			}},
		},
	}
}

// spec returns the spec of s.devices, sorted by name.
func (s *CDISpec) spec() (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Kind: CDIKind}
	names := make([]string, 0, len(s.devices))
	for n := range s.devices {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		spec.Devices = append(spec.Devices, s.devices[n])
	}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("finding the CDI version of %s: %w", s.path, err)
	}
	spec.Version = v
	return spec, nil
}

// write validates the spec with the CDI library and replaces the file
// atomically. The caller holds s.mu or owns s.
func (s *CDISpec) write() error {
	spec, err := s.spec()
	if err != nil {
		return err
	}
	return WriteCDISpec(s.path, spec)
}

// WriteCDISpec writes spec to a hidden temporary file beside path,
// tempSpecPath, which the CDI library validates. It then renames it over
// path.
func WriteCDISpec(path string, spec *cdispec.Spec) error {
	data, err := yaml.Marshal(spec)
	if err != nil {
		return fmt.Errorf("encoding the CDI spec %s: %w", path, err)
	}
	tmp := tempSpecPath(path)
	if err := os.WriteFile(tmp, data, 0o644); err != nil { //nolint:gosec // runtimes read CDI specs
		return fmt.Errorf("writing the CDI spec %s: %w", tmp, err)
	}
	if err := ValidateCDISpecFile(tmp); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replacing the CDI spec %s: %w", path, err)
	}
	return nil
}

// tempSpecPath is where write puts the next spec before renaming it over
// path. It is beside path, so the rename stays within one file system. It is
// hidden and has no .yaml or .json suffix, so a runtime that rescans the
// directory meanwhile never reads two specs defining the same devices. CDI's
// cache would refuse both: "unresolvable CDI devices".
func tempSpecPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
}

// ValidateCDISpecFile reads a spec file with the CDI library, which
// validates its version, kind, device names and edits.
func ValidateCDISpecFile(path string) error {
	if _, err := cdi.ReadSpec(path, 0); err != nil {
		return fmt.Errorf("validating the CDI spec %s: %w", path, err)
	}
	return nil
}
