package isolation

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// DefaultCgroupRoot is where the node's cgroup hierarchy is mounted.
const DefaultCgroupRoot = "/sys/fs/cgroup"

// Cgroups says whether the node runs the unified (v2) cgroup hierarchy,
// which the driver's per-cgroup memory limit needs.
type Cgroups interface {
	Unified() (bool, error)
}

// SysCgroups reads the hierarchy mounted at Root. It is v2 when
// Root/cgroup.controllers exists: only the unified hierarchy has it.
type SysCgroups struct {
	Root string
}

// Unified reports whether Root holds a cgroup v2 hierarchy.
func (s SysCgroups) Unified() (bool, error) {
	_, err := os.Stat(filepath.Join(s.Root, "cgroup.controllers"))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		if _, err := os.Stat(s.Root); err != nil {
			return false, fmt.Errorf("reading the cgroup hierarchy: %w", err)
		}
		return false, nil
	}
	return false, fmt.Errorf("reading the cgroup hierarchy: %w", err)
}

// FixedCgroups is a node whose cgroup version is stated, not read: a fake
// node, or a test's.
type FixedCgroups struct {
	V2 bool
}

// Unified returns V2.
func (f FixedCgroups) Unified() (bool, error) { return f.V2, nil }
