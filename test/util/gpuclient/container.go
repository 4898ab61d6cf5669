package gpuclient

import (
	"bufio"
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// EnvRunc is the runc binary that StartIn runs containers with (runc,
// looked up in PATH, when empty).
const EnvRunc = "GPUSHARE_REAL_GPU_RUNC"

// Runc is the runc binary: GPUSHARE_REAL_GPU_RUNC, else runc in PATH; ""
// when there is none.
func Runc() string {
	if p := os.Getenv(EnvRunc); p != "" {
		return p
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		return ""
	}
	return p
}

// hostDirs are the host's directories a client container sees, read-only:
// its programs and libraries (PyTorch, the NVIDIA driver's libraries) and
// /etc. A top-level name that is a symbolic link on the host (/lib ->
// usr/lib on a merged /usr) is the same link in the container.
var hostDirs = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/usr", "/opt", "/etc"}

// nvidiaControlNodes are the device nodes every CUDA process needs beside
// its cards' /dev/nvidiaN, where the host has them.
var nvidiaControlNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// StartIn starts the client for gib GiB in a real container given c, run
// by runc: its own mount, PID, IPC and UTS namespaces; a root file system
// of the host's system directories, read-only (hostDirs), a private /tmp,
// /dev and /dev/shm; c's mounts (bind mounts of their host paths, over
// those) and environment, nothing of this process's environment but PATH
// and LD_LIBRARY_PATH; and the device nodes of the cards that
// NVIDIA_VISIBLE_DEVICES names (UUIDs or indexes) with the NVIDIA control
// nodes, the device cgroup allowing only those beside runc's defaults.
// That last is what the NVIDIA container runtime does with the variable;
// here the test does it (no toolkit on the machine), so what this shows is
// that what the device plugin or the DRA driver gives a container works
// inside one. With gate, the client holds its memory until gate appears
// (gate's directory is mounted into the container at the same path).
func StartIn(t testing.TB, runc, python string, c Container, gib float64, gate string) *Client {
	t.Helper()
	args := []string{python, "-c", script, fmt.Sprint(gib)}
	var extra []Mount
	if gate != "" {
		args = append(args, gate)
		extra = append(extra, Mount{HostPath: filepath.Dir(gate), ContainerPath: filepath.Dir(gate)})
	}
	devices, err := CardNodes(c.Env["NVIDIA_VISIBLE_DEVICES"], "/proc/driver/nvidia/gpus")
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) > 0 {
		for _, p := range nvidiaControlNodes {
			if _, err := os.Stat(p); err == nil {
				devices = append(devices, p)
			}
		}
	}
	return startContainer(t, runc, args, c, extra, devices)
}

// startContainer runs args in a container given c (see StartIn), with
// extra bind mounts and devices (host paths of device nodes, given at the
// same path in the container).
func startContainer(t testing.TB, runc string, args []string, c Container, extra []Mount, devices []string) *Client {
	t.Helper()
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil { //nolint:gosec // a container's root
		t.Fatal(err)
	}
	spec, err := containerSpec(rootfs, args, c, extra, devices)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	var id [6]byte
	_, _ = rand.Read(id[:])
	name := "gpushare-client-" + hex.EncodeToString(id[:])
	state := filepath.Join(bundle, "state")
	cmd := exec.Command(runc, "--root", state, "run", "--bundle", bundle, name) //nolint:gosec // the test's own runc and bundle
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting runc: %v", err)
	}
	t.Cleanup(func() {
		// A container whose runc was killed (Wait's timeout) is left
		// running; delete it, and its cgroup, in any case.
		if b, err := exec.Command(runc, "--root", state, "delete", "--force", name).CombinedOutput(); err != nil && !strings.Contains(string(b), "does not exist") { //nolint:gosec // as above
			t.Logf("runc delete %s: %v: %s", name, err, b)
		}
	})
	return &Client{cmd: cmd, out: out}
}

// containerSpec is the OCI runtime spec of startContainer's container.
func containerSpec(rootfs string, args []string, c Container, extra []Mount, devices []string) (*specs.Spec, error) {
	env := []string{"HOME=/tmp", "PYTHONUNBUFFERED=1"}
	for _, k := range []string{"PATH", "LD_LIBRARY_PATH"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Env)) {
		env = append(env, k+"="+c.Env[k])
	}
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
		{Destination: "/sys", Type: "none", Source: "/sys", Options: []string{"rbind", "nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
	}
	for _, d := range hostDirs {
		fi, err := os.Lstat(d)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, err
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(d)
			if err != nil {
				return nil, err
			}
			if err := os.Symlink(target, filepath.Join(rootfs, d)); err != nil {
				return nil, err
			}
		default:
			mounts = append(mounts, specs.Mount{Destination: d, Type: "none", Source: d, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
		}
	}
	binds := append(slices.Clone(c.Mounts), extra...)
	if !slices.ContainsFunc(binds, func(m Mount) bool { return m.ContainerPath == "/dev/shm" }) {
		mounts = append(mounts, specs.Mount{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}})
	}
	// Parents before children: /tmp's tmpfs before a bind under /tmp.
	slices.SortStableFunc(binds, func(a, b Mount) int {
		return cmp.Compare(strings.Count(filepath.Clean(a.ContainerPath), "/"), strings.Count(filepath.Clean(b.ContainerPath), "/"))
	})
	for _, m := range binds {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		mounts = append(mounts, specs.Mount{Destination: m.ContainerPath, Type: "none", Source: m.HostPath, Options: []string{"rbind", mode}})
	}
	resources := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}}}
	var nodes []specs.LinuxDevice
	for _, p := range devices {
		d, err := deviceNode(p)
		if err != nil {
			return nil, err
		}
		nodes = append(nodes, d)
		major, minor := d.Major, d.Minor
		resources.Devices = append(resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: d.Type, Major: &major, Minor: &minor, Access: "rwm"})
	}
	return &specs.Spec{
		Version:  specs.Version,
		Root:     &specs.Root{Path: rootfs},
		Hostname: "gpu-client",
		Process: &specs.Process{
			Args: args,
			Env:  env,
			Cwd:  "/tmp",
			User: specs.User{UID: 0, GID: 0},
			// containerd's default set: CAP_MKNOD among them, so the
			// device cgroup, not a missing capability, is what keeps a
			// container off the devices it was not given.
			Capabilities: &specs.LinuxCapabilities{Bounding: defaultCaps, Effective: defaultCaps, Permitted: defaultCaps},
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace}, {Type: specs.MountNamespace},
			},
			Devices:   nodes,
			Resources: resources,
		},
	}, nil
}

// defaultCaps are the capabilities containerd gives a container by
// default.
var defaultCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE",
}

// deviceNode describes the host's character device at path, to be given
// at the same path in the container.
func deviceNode(path string) (specs.LinuxDevice, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return specs.LinuxDevice{}, fmt.Errorf("reading device node %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return specs.LinuxDevice{}, fmt.Errorf("device node %s: not a character device", path)
	}
	mode := fs.FileMode(st.Mode & 0o777)
	uid, gid := st.Uid, st.Gid
	return specs.LinuxDevice{
		Path: path, Type: "c",
		Major: int64(unix.Major(st.Rdev)), Minor: int64(unix.Minor(st.Rdev)), //nolint:gosec // device numbers fit
		FileMode: &mode, UID: &uid, GID: &gid,
	}, nil
}

// CardNodes returns the device nodes of the cards that
// NVIDIA_VISIBLE_DEVICES=visible names (UUIDs or indexes in the driver's
// enumeration; "all" for every card; "", "void" and "none" for none):
// /dev/nvidiaN, N the card's minor number as the driver's /proc directory
// gpus says (a directory per card, each with an "information" file of
// "Key: value" lines).
func CardNodes(visible, gpus string) ([]string, error) {
	switch visible {
	case "", "void", "none":
		return nil, nil
	}
	cards, err := driverCards(gpus)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, v := range strings.Split(visible, ",") {
		v = strings.TrimSpace(v)
		found := false
		for _, c := range cards {
			if visible == "all" || c.uuid == v || strconv.Itoa(c.index) == v {
				out, found = append(out, "/dev/nvidia"+strconv.Itoa(c.minor)), true
			}
		}
		if !found {
			return nil, fmt.Errorf("NVIDIA_VISIBLE_DEVICES names %q; the driver (%s) has no such card", v, gpus)
		}
	}
	return out, nil
}

// driverCard is one card as the driver's /proc directory lists it.
type driverCard struct {
	uuid         string
	index, minor int
}

// driverCards reads each card's UUID and minor number under gpus, in the
// directories' order (by PCI address, the driver's enumeration order: the
// index).
func driverCards(gpus string) ([]driverCard, error) {
	entries, err := os.ReadDir(gpus)
	if err != nil {
		return nil, fmt.Errorf("listing the driver's cards: %w", err)
	}
	var cards []driverCard
	for i, e := range entries {
		f, err := os.Open(filepath.Join(gpus, e.Name(), "information")) //nolint:gosec // the driver's files
		if err != nil {
			return nil, fmt.Errorf("reading card %s: %w", e.Name(), err)
		}
		c := driverCard{index: i, minor: -1}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			k, v, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			switch strings.TrimSpace(k) {
			case "GPU UUID":
				c.uuid = strings.TrimSpace(v)
			case "Device Minor":
				c.minor, err = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		_ = f.Close()
		if err != nil {
			return nil, fmt.Errorf("card %s: reading its device minor: %w", e.Name(), err)
		}
		if c.minor < 0 || c.uuid == "" {
			return nil, fmt.Errorf("card %s: no UUID or device minor in its information file", e.Name())
		}
		cards = append(cards, c)
	}
	return cards, nil
}
