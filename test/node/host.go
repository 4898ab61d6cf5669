package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Paths on this machine. The node uses nothing else, except what
// kubelet, containerd and the CNI plugins put at fixed places (kubelet's
// root, /var/log/containers, shim
// sockets under /run/containerd/s), which teardown removes too.
const (
	// DataDir holds containerd's root and state, the configuration files,
	// the CNI address allocations, the pods' logs and the host state to
	// restore (hostStateFile).
	DataDir = "/var/lib/gpushare-node"
	// KubeletDir is kubelet's root directory: kubelet's device manager
	// serves /var/lib/kubelet/device-plugins/kubelet.sock whatever
	// --root-dir says, and the chart's --kubelet-dir expects both there.
	KubeletDir = "/var/lib/kubelet"
	// LockPath is the machine-wide lock of the one node: held by the test
	// binary or `make node-demo` process that runs it, with that
	// process's id and purpose written inside.
	LockPath = "/run/gpushare-node.lock"
	// BridgeName is the CNI bridge; PodCIDR its pods' addresses.
	BridgeName = "gpushare0"
	PodCIDR    = "10.244.0.0/24"
	// containerLogLinks is kubelet's fixed directory of links to container
	// logs.
	containerLogLinks = "/var/log/containers"
)

// ErrNotRoot is returned where the node needs root (tests skip on it).
var ErrNotRoot = errors.New("a real node needs root: containerd, runc, kubelet, iptables and mounts")

// hostPackages are the Debian packages the node runs, each with what
// shows it is there: a command on PATH (from this package or another,
// e.g. Docker's containerd.io, which ships containerd, ctr and runc), or a
// file.
var hostPackages = []struct{ name, command, file string }{
	{name: "containerd", command: "containerd"}, // with ctr and containerd-shim-runc-v2
	{name: "containerd", command: "ctr"},
	{name: "runc", command: "runc"},
	{name: "containernetworking-plugins", file: CNIBinDir + "/bridge"}, // host-local, loopback, portmap beside it
	{name: "iptables", command: "iptables-restore"},                    // kube-proxy
	{name: "iproute2", command: "ip"},
}

// CNIBinDir is where Debian's containernetworking-plugins installs.
const CNIBinDir = "/usr/lib/cni"

// EnsureHost checks that this is Linux, that we are root, and that the
// Debian packages the node runs are installed, installing the missing ones
// with apt-get (after an apt-get update if the first try fails). Output
// goes to log.
func EnsureHost(ctx context.Context, log func(format string, args ...any)) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	var missing []string
	for _, p := range hostPackages {
		var err error
		if p.command != "" {
			_, err = exec.LookPath(p.command)
		} else {
			_, err = os.Stat(p.file)
		}
		if err != nil && !slices.Contains(missing, p.name) {
			missing = append(missing, p.name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("the real node needs the Debian packages %s (missing here), and there is no apt-get to install them: install them, or run on Debian", strings.Join(missing, ", "))
	}
	install := func() error {
		args := append([]string{"install", "-y", "-q", "--no-install-recommends"}, missing...)
		return run(ctx, log, "apt-get", args...)
	}
	log("installing %s with apt-get", strings.Join(missing, ", "))
	if err := install(); err != nil {
		log("apt-get install failed (%v); running apt-get update and trying again", err)
		if err := run(ctx, log, "apt-get", "update", "-q"); err != nil {
			return fmt.Errorf("installing %s: apt-get update: %w", strings.Join(missing, ", "), err)
		}
		if err := install(); err != nil {
			return fmt.Errorf("installing %s: %w", strings.Join(missing, ", "), err)
		}
	}
	return nil
}

// run runs name with args, its output in the error and, on success, in log
// (one line).
func run(ctx context.Context, log func(string, ...any), name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, lastLines(string(out), 20))
	}
	if log != nil {
		log("%s %s: ok", name, strings.Join(args, " "))
	}
	return nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// HostAddress returns this machine's IPv4 address on the interface of its
// default route: the node's address (kubelet --node-ip) and the one
// kube-apiserver advertises (framework.NodeAccess), which pods reach
// through the kubernetes Service. No packet is sent.
func HostAddress() (string, error) {
	// Connecting a UDP socket only picks the route and its source address.
	c, err := net.Dial("udp4", "192.0.2.254:9")
	if err != nil {
		return "", fmt.Errorf("finding this machine's address: no IPv4 default route (%w)", err)
	}
	defer func() { _ = c.Close() }()
	addr, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok || addr.IP.IsLoopback() || addr.IP.IsUnspecified() {
		return "", fmt.Errorf("finding this machine's address: the default route leaves from %v", c.LocalAddr())
	}
	return addr.IP.String(), nil
}

// Lock is the machine-wide node lock (LockPath).
type Lock struct{ f *os.File }

// ErrLocked is returned by TakeLock when another process runs a node
// that it does not wait for.
var ErrLocked = errors.New("another process runs the real node on this machine")

// demoPurpose marks the lock of `make node-demo`, which holds the node
// until make node-demo-down: nobody waits for it.
const demoPurpose = "make node-demo"

// TakeLock takes LockPath and writes this process's id and purpose into
// it. While another process holds it, TakeLock waits (saying so once to
// logf) until ctx ends, unless that process is `make node-demo` (its
// purpose starts with "make node-demo"): then, and when ctx ends, it
// fails with ErrLocked, naming the holder.
func TakeLock(ctx context.Context, purpose string, logf func(string, ...any)) (*Lock, error) {
	return takeLock(ctx, LockPath, purpose, logf)
}

// takeLock is TakeLock of the lock file at path.
func takeLock(ctx context.Context, path, purpose string, logf func(string, ...any)) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644) //nolint:gosec // G304: the lock's path
	if err != nil {
		return nil, fmt.Errorf("opening the node lock: %w", err)
	}
	announced := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		b, _ := os.ReadFile(path)
		holder := strings.TrimSpace(string(b))
		_, holderPurpose, _ := strings.Cut(holder, ": ")
		if strings.HasPrefix(holderPurpose, demoPurpose) {
			_ = f.Close()
			return nil, fmt.Errorf("%w (%s): make node-demo-down stops it", ErrLocked, holder)
		}
		if !announced && logf != nil {
			logf("waiting for the node lock %s, held by %s", path, holder)
			announced = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("%w (%s) and kept it: %w", ErrLocked, holder, ctx.Err())
		case <-time.After(2 * time.Second):
		}
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("pid %d: %s\n", os.Getpid(), purpose)), 0)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up.
func (l *Lock) Release() {
	if l == nil || l.f == nil {
		return
	}
	_ = l.f.Truncate(0)
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}

// hostState is what the node changed outside DataDir and must put back,
// saved in hostStateFile before the first change so that a teardown after
// a crash restores it too.
type hostState struct {
	// Sysctls maps a /proc/sys path to the value it had.
	Sysctls map[string]string `json:"sysctls"`
	// Created are directories that did not exist before the node ran
	// (kubelet's root, the chart's hostPath directories), removed with
	// everything in them at teardown.
	Created []string `json:"created"`
	// CreatedShared are directories that did not exist before the node
	// ran, where others may put things too (/run/containerd): teardown removes
	// only what is empty in them.
	CreatedShared []string `json:"createdShared"`
	// KubeChains are the iptables chains named KUBE-* the machine had
	// before the node ran ("BIN/TABLE/CHAIN"), kept at teardown; the others
	// are removed. Valid when ChainsRecorded.
	KubeChains     []string `json:"kubeChains"`
	ChainsRecorded bool     `json:"chainsRecorded"`
	// Runtime is the runtime the node last started with: a teardown after
	// a crash starts that containerd again.
	Runtime Runtime `json:"runtime"`
}

const hostStateFile = DataDir + "/host-state.json"

// nodeSysctls are the values the node needs: forwarding for the bridge,
// and bridged traffic through iptables, so kube-proxy's rules apply
// between pods on the bridge too.
var nodeSysctls = map[string]string{
	"/proc/sys/net/ipv4/ip_forward":                "1",
	"/proc/sys/net/bridge/bridge-nf-call-iptables": "1",
}

// loadHostState reads hostStateFile; a missing file is an empty state.
func loadHostState() (hostState, error) {
	st := hostState{Sysctls: map[string]string{}}
	b, err := os.ReadFile(hostStateFile)
	if errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("reading %s: %w", hostStateFile, err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("parsing %s: %w", hostStateFile, err)
	}
	if st.Sysctls == nil {
		st.Sysctls = map[string]string{}
	}
	return st, nil
}

func (st hostState) save() error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the host state: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(hostStateFile), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", DataDir, err)
	}
	if err := os.WriteFile(hostStateFile, b, 0o644); err != nil { //nolint:gosec // G306: no secrets
		return fmt.Errorf("writing %s: %w", hostStateFile, err)
	}
	return nil
}

// applySysctls records each sysctl's value (unless already recorded) and
// sets nodeSysctls.
func (st *hostState) applySysctls() error {
	for path, want := range nodeSysctls {
		old, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("reading %s (is the br_netfilter module loaded?): %w", path, err)
		}
		if _, ok := st.Sysctls[path]; !ok {
			st.Sysctls[path] = strings.TrimSpace(string(old))
			if err := st.save(); err != nil {
				return err
			}
		}
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil { //nolint:gosec // G306: a sysctl
			return fmt.Errorf("setting %s to %s: %w", path, want, err)
		}
	}
	return nil
}

// restoreSysctls puts back every recorded value.
func (st hostState) restoreSysctls() error {
	var errs []error
	for path, old := range st.Sysctls {
		if err := os.WriteFile(path, []byte(old), 0o644); err != nil { //nolint:gosec // G306: a sysctl
			errs = append(errs, fmt.Errorf("restoring %s to %s: %w", path, old, err))
		}
	}
	return errors.Join(errs...)
}

// noteCreated records the dirs that do not exist yet in *list (Created or
// CreatedShared), for removal at teardown.
func (st *hostState) noteCreated(list *[]string, dirs ...string) error {
	changed := false
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			continue
		}
		if !slices.Contains(*list, d) {
			*list = append(*list, d)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return st.save()
}

// removeEmptyDirs removes dir and the directories under it that are empty
// once their empty subdirectories are gone; files stay, and so do their
// directories.
func removeEmptyDirs(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if e.IsDir() && e.Type()&os.ModeSymlink == 0 {
			removeEmptyDirs(filepath.Join(dir, e.Name()))
		}
	}
	_ = syscall.Rmdir(dir)
}

// readProc reads a small /proc file, "" when it cannot.
func readProc(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}
