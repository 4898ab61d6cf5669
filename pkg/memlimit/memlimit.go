package memlimit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path"
	"runtime/debug"
	"strconv"
	"strings"

	"k8s.io/klog/v2"
)

// DefaultFraction is the share of the cgroup's limit that Apply gives the
// Go runtime. The rest is room for what the runtime does not count: cgo,
// goroutine stacks above the limit's reach, and the kernel's page cache
// charged to the cgroup.
const DefaultFraction = 0.9

// unlimited is the smallest value a cgroup v1 limit file holds when no
// limit is set. The kernel writes PAGE_COUNTER_MAX pages, about 2^63 bytes,
// rounded down to the page size.
const unlimited = int64(1) << 62

// ErrNoLimit is returned by Limit when no cgroup of the process has a
// memory limit.
var ErrNoLimit = errors.New("no cgroup memory limit")

// Limit is the lowest memory limit, in bytes, of the process's cgroup and
// its ancestors. It reads fsys, the host's root such as os.DirFS("/").
// /proc/self/cgroup names the cgroups. Each one's limit is memory.max under
// /sys/fs/cgroup for cgroup v2, "max" when none, or memory.limit_in_bytes
// under /sys/fs/cgroup/memory for v1. Every container's cgroup namespace
// shows the process at "/", so the mount's root holds its own limit. file
// names the file the limit came from.
//
// Example: /proc/self/cgroup "0::/kubepods/pod1/c1" and memory.max
// "536870912" in /sys/fs/cgroup/kubepods/pod1/c1 and "max" above it:
// 512 MiB from sys/fs/cgroup/kubepods/pod1/c1/memory.max.
func Limit(fsys fs.FS) (limit int64, file string, err error) {
	b, err := fs.ReadFile(fsys, "proc/self/cgroup")
	if err != nil {
		return 0, "", fmt.Errorf("reading the process's cgroups: %w", err)
	}
	limit = math.MaxInt64
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		// hierarchy-ID:controller-list:cgroup-path
		fields := strings.SplitN(sc.Text(), ":", 3)
		if len(fields) != 3 {
			continue
		}
		var root, name string
		switch {
		case fields[0] == "0" && fields[1] == "":
			root, name = "sys/fs/cgroup", "memory.max"
		case hasController(fields[1], "memory"):
			root, name = "sys/fs/cgroup/memory", "memory.limit_in_bytes"
		default:
			continue
		}
		for dir := path.Join(root, fields[2]); ; dir = path.Dir(dir) {
			f := path.Join(dir, name)
			if v, ok, err := readLimit(fsys, f); err != nil {
				return 0, "", err
			} else if ok && v < limit {
				limit, file = v, f
			}
			if dir == root || !strings.HasPrefix(dir, root+"/") {
				break
			}
		}
	}
	if file == "" {
		return 0, "", ErrNoLimit
	}
	return limit, file, nil
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readLimit reads one limit file: ok is false when it is missing or says
// there is no limit.
func readLimit(fsys fs.FS, file string) (v int64, ok bool, err error) {
	b, err := fs.ReadFile(fsys, file)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading %s: %w", file, err)
	}
	s := string(bytes.TrimSpace(b))
	if s == "max" {
		return 0, false, nil
	}
	v, err = strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("reading %s: %w", file, err)
	}
	if v >= unlimited || v <= 0 {
		return 0, false, nil
	}
	return v, true, nil
}

// Apply sets the runtime's soft memory limit to fraction of Limit(fsys).
// A GOMEMLIMIT in env, such as os.Getenv, wins: the runtime has applied it
// already. Apply logs what it did and returns the limit set, 0 when it set
// none. An unreadable cgroup is logged, not fatal: the runtime then runs
// without a soft limit.
func Apply(logger klog.Logger, fsys fs.FS, env func(string) string, fraction float64) int64 {
	if v := env("GOMEMLIMIT"); v != "" {
		logger.V(2).Info("Soft memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return 0
	}
	limit, file, err := Limit(fsys)
	switch {
	case errors.Is(err, ErrNoLimit):
		logger.V(2).Info("No cgroup memory limit: no soft memory limit")
		return 0
	case err != nil:
		logger.Info("Not setting a soft memory limit", "err", err)
		return 0
	}
	soft := int64(float64(limit) * fraction)
	debug.SetMemoryLimit(soft)
	logger.Info("Soft memory limit from the cgroup", "limitBytes", limit, "softLimitBytes", soft, "file", file)
	return soft
}
