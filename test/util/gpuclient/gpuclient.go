package gpuclient

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/isolation"
)

// script allocates argv[1] GiB on the GPU it sees, writes to it, and
// prints one JSON line: ok, the error, and what cudaMemGetInfo said (MiB).
// With argv[2], a file name, it writes argv[2]+".ready" once it holds the
// memory and waits for argv[2] to appear before it computes on the memory
// again and checks the result.
const script = `
import json, os, sys, time
out = {"ok": False}
try:
    import torch
    gib = float(sys.argv[1])
    wait = sys.argv[2] if len(sys.argv) > 2 else ""
    free, total = torch.cuda.mem_get_info()
    out["freeMiB"], out["totalMiB"] = free >> 20, total >> 20
    x = torch.empty(int(gib * (1 << 30)), dtype=torch.uint8, device="cuda")
    x.fill_(7)
    torch.cuda.synchronize()
    if wait:
        open(wait + ".ready", "w").close()
        while not os.path.exists(wait):
            time.sleep(0.05)
        x.add_(1)
        torch.cuda.synchronize()
        if int(x[-1].item()) != 8:
            raise RuntimeError("computed %d, want 8" % int(x[-1].item()))
    out["ok"] = True
except BaseException as e:
    out["error"] = (type(e).__name__ + ": " + str(e))[:400]
print(json.dumps(out), flush=True)
`

// Result is what the client printed.
type Result struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
	// FreeMiB and TotalMiB are what cudaMemGetInfo said before the
	// allocation.
	FreeMiB  int64 `json:"freeMiB"`
	TotalMiB int64 `json:"totalMiB"`
}

// Mount is a host directory a container gets.
type Mount struct {
	HostPath, ContainerPath string
	// ReadOnly: bound read-only (mps mode's log directory).
	ReadOnly bool
}

// Container is what a container gets from a device plugin or a DRA
// driver.
type Container struct {
	Env    map[string]string
	Mounts []Mount
}

// Without returns c without the variables named.
func (c Container) Without(names ...string) Container {
	out := Container{Env: map[string]string{}, Mounts: c.Mounts}
	for k, v := range c.Env {
		if !slices.Contains(names, k) {
			out.Env[k] = v
		}
	}
	return out
}

// HostEnv is the environment of a process on the host that stands for a
// container given c: this process's environment without its CUDA_
// variables, then c's, each value that is a mount's container path made
// its host path; the container sees only its cards (CUDA_VISIBLE_DEVICES,
// as the NVIDIA runtime would make it from NVIDIA_VISIBLE_DEVICES).
func HostEnv(c Container) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CUDA_") {
			out = append(out, kv)
		}
	}
	hostOf := map[string]string{}
	for _, m := range c.Mounts {
		hostOf[m.ContainerPath] = m.HostPath
	}
	for k, v := range c.Env {
		if h, ok := hostOf[v]; ok {
			v = h
		}
		out = append(out, k+"="+v)
	}
	if v, ok := c.Env["NVIDIA_VISIBLE_DEVICES"]; ok {
		if _, set := c.Env["CUDA_VISIBLE_DEVICES"]; !set {
			out = append(out, "CUDA_VISIBLE_DEVICES="+v)
		}
	}
	return out
}

// Client is a running client.
type Client struct {
	cmd *exec.Cmd
	out *strings.Builder
}

// Start starts python running the client for gib GiB as a container given
// c; with gate, it holds the memory until the file gate appears (see
// WaitFile for gate+".ready").
func Start(t testing.TB, python string, c Container, gib float64, gate string) *Client {
	t.Helper()
	args := []string{"-c", script, fmt.Sprint(gib)}
	if gate != "" {
		args = append(args, gate)
	}
	cmd := exec.Command(python, args...) //nolint:gosec // the test's own script
	cmd.Env = HostEnv(c)
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return &Client{cmd: cmd, out: out}
}

// Wait waits up to 3 minutes for the client and returns what it printed.
func (c *Client) Wait(t testing.TB) Result {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Logf("client exited: %v", err)
		}
	case <-time.After(3 * time.Minute):
		_ = c.cmd.Process.Kill()
		t.Fatalf("client did not end in 3 minutes (%v once killed); output:\n%s", <-done, c.out)
	}
	lines := strings.Split(strings.TrimSpace(c.out.String()), "\n")
	var r Result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("client output is not its JSON line: %v\n%s", err, c.out)
	}
	return r
}

// Run runs the client for gib GiB as a container given c.
func Run(t testing.TB, python string, c Container, gib float64) Result {
	t.Helper()
	return Start(t, python, c, gib, "").Wait(t)
}

// WaitFile waits up to d for path to exist.
func WaitFile(t testing.TB, path string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not appear in %v", path, d)
}

// MPSRoot returns a fresh MPS root whose shm is this host's /dev/shm, as
// the chart mounts <root>/shm at /dev/shm in the plugin's, the driver's
// and the clients' containers. It is short, like the default
// /run/gpushare/mps (t.TempDir's names are too long for MPS's sockets:
// isolation.MaxMPSPipeDirLen). When the test fails it logs the daemons'
// logs.
func MPSRoot(t testing.TB) string {
	t.Helper()
	root, err := os.MkdirTemp("", "mps")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(root, "*", "log", "*"))
			for _, l := range logs {
				b, _ := os.ReadFile(l) //nolint:gosec // the test's own directory
				t.Logf("%s:\n%s", l, b)
			}
		}
		if err := os.RemoveAll(root); err != nil {
			t.Error(err)
		}
	})
	if err := os.Symlink("/dev/shm", filepath.Join(root, isolation.MPSShmDir)); err != nil {
		t.Fatal(err)
	}
	return root
}

// Environment of the real-GPU tests (make gpu-check sets them).
const (
	// EnvRealGPU=1 runs them; without it they are skipped.
	EnvRealGPU = "GPUSHARE_REAL_GPU"
	// EnvPython is a Python with PyTorch built for CUDA (python3 when
	// empty).
	EnvPython = "GPUSHARE_REAL_GPU_PYTHON"
	// EnvMPSControl is nvidia-cuda-mps-control (looked up in PATH when
	// empty).
	EnvMPSControl = "GPUSHARE_REAL_GPU_MPS_CONTROL"
)

// Open skips the test unless GPUSHARE_REAL_GPU=1, else opens NVML and
// returns it with the cards, failing unless the first has at least minMiB.
// When the test ends the first card is back in the default compute mode
// (mps mode sets it to exclusive-process) and NVML is closed.
func Open(t testing.TB, minMiB int64) (*gpu.NVML, []gpu.Device) {
	t.Helper()
	if os.Getenv(EnvRealGPU) != "1" {
		t.Skipf("set %s=1 on a machine with an NVIDIA GPU (make gpu-check)", EnvRealGPU)
	}
	n, err := gpu.OpenNVML(nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	devs, err := n.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) == 0 || devs[0].MemoryMiB < minMiB {
		t.Fatalf("cards %+v: the test needs one of at least %d MiB", devs, minMiB)
	}
	t.Cleanup(func() {
		if err := n.SetComputeMode(devs[0].UUID, gpu.ComputeDefault); err != nil {
			t.Errorf("restoring the default compute mode: %v", err)
		}
	})
	return n, devs
}

// Python is the client's interpreter: GPUSHARE_REAL_GPU_PYTHON, else
// python3.
func Python() string { return cmp.Or(os.Getenv(EnvPython), "python3") }

// MPSControl is nvidia-cuda-mps-control: GPUSHARE_REAL_GPU_MPS_CONTROL,
// else the name, looked up in PATH.
func MPSControl() string { return cmp.Or(os.Getenv(EnvMPSControl), isolation.DefaultMPSControl) }

// Together runs a client for each container of cs at once, client i
// allocating gibs[i] GiB: each holds its memory until every one holds
// its own, then all compute on it. With runc (not "") each runs in a
// container of its own (StartIn), else on the host. It returns what each
// printed, in cs's order.
func Together(t testing.TB, runc, python string, cs []Container, gibs []float64) []Result {
	t.Helper()
	dir := t.TempDir()
	clients := make([]*Client, len(cs))
	gates := make([]string, len(cs))
	for i, c := range cs {
		gates[i] = filepath.Join(dir, fmt.Sprint("gate-", i))
		if runc != "" {
			clients[i] = StartIn(t, runc, python, c, gibs[i], gates[i])
		} else {
			clients[i] = Start(t, python, c, gibs[i], gates[i])
		}
	}
	for _, g := range gates {
		WaitFile(t, g+".ready", 90*time.Second)
	}
	for _, g := range gates {
		if err := os.WriteFile(g, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]Result, len(cs))
	for i, c := range clients {
		out[i] = c.Wait(t)
	}
	return out
}

// faultScript launches a CUDA kernel (with CuPy) that writes to a device
// address nothing maps, and prints one JSON line: whether the launch
// faulted, and the error. The driver reports such a fault as an XID (31, a
// GPU memory page fault) of the card: an application's error, after which
// the card serves other processes as before.
const faultScript = `
import json, os
out = {"faulted": False}
try:
    import cupy as cp
    k = cp.RawKernel(r'extern "C" __global__ void bad(unsigned long long a) { *(volatile int*)a = 1; }', "bad")
    k((1,), (1,), (cp.uint64(0x10),))
    cp.cuda.runtime.deviceSynchronize()
except ImportError as e:
    out["error"] = "ImportError: " + str(e)
except BaseException as e:
    out["faulted"] = True
    out["error"] = (type(e).__name__ + ": " + str(e))[:400]
print(json.dumps(out), flush=True)
os._exit(0)  # CuPy's teardown on the faulted context prints tracebacks
`

// Fault runs faultScript with python on the cards env's CUDA_VISIBLE_DEVICES
// names, on the host: whether the kernel faulted, and the error it got. It
// skips the test when python has no CuPy.
func Fault(t testing.TB, python string, env map[string]string) (faulted bool, msg string) {
	t.Helper()
	cmd := exec.Command(python, "-c", faultScript) //nolint:gosec // the test's own script
	cmd.Env = HostEnv(Container{Env: env})
	b, err := cmd.CombinedOutput()
	var r struct {
		Faulted bool   `json:"faulted"`
		Error   string `json:"error"`
	}
	jerr := errors.New("no JSON line")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, `{"faulted"`) {
			jerr = json.Unmarshal([]byte(l), &r)
			break
		}
	}
	if jerr != nil {
		t.Fatalf("the faulting kernel printed no JSON line (%v, exit %v):\n%s", jerr, err, b)
	}
	if strings.HasPrefix(r.Error, "ImportError") {
		t.Skipf("%s has no CuPy to launch the faulting kernel: %s", python, r.Error)
	}
	return r.Faulted, r.Error
}
