package isolation

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Paths of the MPS shared-memory directory. The MPS server and its clients
// exchange shared memory in /dev/shm. So the container where the daemons
// run and every mps container mount the same host directory,
// <mps-root>/shm, there.
const (
	// DevShm is /dev/shm, in the plugin's container and in clients'.
	DevShm = "/dev/shm"
	// MPSShmDir is the shared directory's name under the MPS root.
	MPSShmDir = "shm"
	// ProcSelfStatus holds the plugin process's capabilities, CapEff.
	ProcSelfStatus = "/proc/self/status"
)

// capSysAdmin is CAP_SYS_ADMIN's bit in a capability set, from
// linux/capability.h.
const capSysAdmin = 21

// SysAdmin reports whether the process whose status file, ProcSelfStatus,
// is at path has CAP_SYS_ADMIN in its effective set. NVML changes a card's
// compute mode only for such a process.
func SysAdmin(path string) (bool, error) {
	f, err := os.Open(path) //nolint:gosec // /proc/self/status, or a test's file
	if err != nil {
		return false, fmt.Errorf("reading the process capabilities: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CapEff:")
		if !ok {
			continue
		}
		set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			return false, fmt.Errorf("reading the process capabilities from %s: CapEff %q: %w", path, strings.TrimSpace(v), err)
		}
		return set&(1<<capSysAdmin) != 0, nil
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("reading the process capabilities from %s: %w", path, err)
	}
	return false, fmt.Errorf("reading the process capabilities: %s has no CapEff line", path)
}

// CheckMPSShm returns nil when devShm, the plugin's /dev/shm, is the
// directory <mpsRoot>/shm that mps containers get as their /dev/shm.
// Otherwise it returns an error saying what to mount.
func CheckMPSShm(devShm, mpsRoot string) error {
	shm := filepath.Join(mpsRoot, MPSShmDir)
	a, err := os.Stat(devShm)
	if err != nil {
		return fmt.Errorf("checking %s: %w", devShm, err)
	}
	b, err := os.Stat(shm)
	if err != nil {
		return fmt.Errorf("%w; mount the host's %s at %s in the plugin's container", err, shm, devShm)
	}
	if !os.SameFile(a, b) {
		return fmt.Errorf("%s is not %s: mount the host's %s at %s in the plugin's container, so that the MPS server shares memory with its clients",
			devShm, shm, shm, devShm)
	}
	return nil
}
