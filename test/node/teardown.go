package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpushare/gpushare/test/node/probe"
)

// mountPoints returns the mount points of this mount namespace that are
// dir or under it, deepest first (the order to unmount them in).
func mountPoints(dir string) ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	dir = filepath.Clean(dir)
	var out []string
	for _, m := range probe.ParseMountinfo(string(data)) {
		if m.Target == dir || strings.HasPrefix(m.Target, dir+"/") {
			out = append(out, m.Target)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return strings.Count(out[i], "/") > strings.Count(out[j], "/") })
	return out, nil
}

// unmountUnder detaches every mount at or under dir, deepest first, and
// fails when one stays.
func unmountUnder(dir string) error {
	for range 5 {
		mps, err := mountPoints(dir)
		if err != nil {
			return err
		}
		if len(mps) == 0 {
			return nil
		}
		for _, mp := range mps {
			if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				return fmt.Errorf("unmounting %s: %w", mp, err)
			}
		}
	}
	mps, err := mountPoints(dir)
	if err != nil {
		return err
	}
	if len(mps) > 0 {
		return fmt.Errorf("unmounting under %s: %d mounts stay, e.g. %s", dir, len(mps), mps[0])
	}
	return nil
}

// removeTree unmounts everything under dir, then removes it. It never
// removes through a mount point that stays.
func removeTree(dir string) error {
	if err := unmountUnder(dir); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing %s: %w", dir, err)
	}
	return nil
}

// shimsOf returns the process ids of containerd's runc shims serving the
// containerd at socket: their command line names it after -address.
func shimsOf(socket string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == socket {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// shimSockets returns the unix socket paths pid listens on under
// /run/containerd/s (a shim's), read from its descriptors and
// /proc/net/unix.
func shimSockets(pid int) []string {
	fds, err := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		// Num RefCount Protocol Flags Type St Inode Path
		if len(f) >= 8 && inodes[f[6]] && strings.HasPrefix(f[7], "/run/containerd/s/") {
			out = append(out, f[7])
		}
	}
	return out
}

// killShims SIGKILLs the shims of the containerd at socket (left behind
// when containerd died or would not stop), removes their sockets, and
// waits for them to go. It returns how many there were.
func killShims(socket string) (int, error) {
	pids := shimsOf(socket)
	var sockets []string
	for _, pid := range pids {
		sockets = append(sockets, shimSockets(pid)...)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(shimsOf(socket)) > 0 {
		if time.Now().After(deadline) {
			return len(pids), fmt.Errorf("killing containerd's shims: %v still run after SIGKILL", shimsOf(socket))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range sockets {
		_ = os.Remove(s)
	}
	return len(pids), nil
}

// runcContainers lists the container ids runc keeps state for under root.
func runcContainers(root string) []string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() {
			ids = append(ids, e.Name())
		}
	}
	return ids
}

// runcDeleteAll force-deletes (kills, then removes) every container runc
// keeps state for under root: those a dead shim left.
func runcDeleteAll(ctx context.Context, root string) (int, error) {
	ids := runcContainers(root)
	var errs []error
	for _, id := range ids {
		out, err := exec.CommandContext(ctx, "runc", "--root", root, "delete", "--force", id).CombinedOutput()
		if err != nil {
			errs = append(errs, fmt.Errorf("runc delete --force %s: %w: %s", id, err, bytes.TrimSpace(out)))
		}
	}
	return len(ids), errors.Join(errs...)
}

// cgroupMounts returns this machine's cgroup hierarchies' mount points
// (v1 controllers and the v2 unified tree), each once.
func cgroupMounts() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	var out []string
	for _, m := range probe.ParseMountinfo(string(data)) {
		if (m.FSType == "cgroup" || m.FSType == "cgroup2") && !slices.Contains(out, m.Target) {
			out = append(out, m.Target)
		}
	}
	return out, nil
}

// kubeletCgroup is the cgroup kubelet (cgroupfs driver, cgroupsPerQOS)
// makes for pods, under every hierarchy.
const kubeletCgroup = "kubepods"

// removeCgroups removes the kubepods cgroup tree from every hierarchy,
// deepest first. A cgroup that still holds a process cannot be removed:
// that is an error naming it.
func removeCgroups() error {
	mounts, err := cgroupMounts()
	if err != nil {
		return err
	}
	var errs []error
	for _, m := range mounts {
		top := filepath.Join(m, kubeletCgroup)
		if _, err := os.Stat(top); err != nil {
			continue
		}
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.SliceStable(dirs, func(i, j int) bool { return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/") })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				procs := readProc(filepath.Join(d, "cgroup.procs"))
				errs = append(errs, fmt.Errorf("removing cgroup %s (processes: %q): %w", d, procs, err))
				break
			}
		}
	}
	return errors.Join(errs...)
}

// removeLogLinks removes kubelet's links in /var/log/containers that point
// into podLogs.
func removeLogLinks(podLogs string) error {
	entries, err := os.ReadDir(containerLogLinks)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", containerLogLinks, err)
	}
	for _, e := range entries {
		p := filepath.Join(containerLogLinks, e.Name())
		target, err := os.Readlink(p)
		if err == nil && strings.HasPrefix(target, podLogs+"/") {
			if err := os.Remove(p); err != nil {
				return fmt.Errorf("removing %s: %w", p, err)
			}
		}
	}
	return nil
}

// deleteLink deletes a network interface if it exists.
func deleteLink(ctx context.Context, name string) error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	out, err := exec.CommandContext(ctx, "ip", "link", "delete", name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip link delete %s: %w: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}
