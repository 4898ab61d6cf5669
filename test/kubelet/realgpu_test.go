package kubelet_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/isolation"
	"github.com/gpushare/gpushare/test/kubelet/devicehost"
	"github.com/gpushare/gpushare/test/util"
	"github.com/gpushare/gpushare/test/util/gpuclient"
)

// envRealGPUPlugin is the gpushare-device-plugin binary whose mps-daemons
// command serves TestRealGPU's external-daemons subtest (make gpu-check
// sets it); when empty the daemons' side runs in this test process
// instead. The other variables: gpuclient.EnvRealGPU, EnvPython,
// EnvMPSControl.
const envRealGPUPlugin = "GPUSHARE_REAL_GPU_PLUGIN"

// TestRealGPU runs the device plugin on this machine's NVIDIA cards, with
// real NVML, under kubelet's own device manager over real gRPC, and checks
// each isolation mode with real CUDA processes (make gpu-check; skipped
// unless GPUSHARE_REAL_GPU=1, so it runs where a GPU is, never in make
// test). It uses card 0 and leaves it in the default compute mode.
//   - discovery: NVML lists the cards, the driver and each card's features;
//   - health: the XID watch registers and runs without events, Probe
//     answers;
//   - xid: a CUDA kernel's page fault (with CuPy) reaches the XID watch as
//     the card's application XID, not critical; the card serves on;
//   - none: kubelet advertises the cards' memory; a container's share is
//     advisory (it allocates beyond it), and says so;
//   - driver: refused on a driver older than R615 (or without the CDI
//     hook), naming what is missing;
//   - mps (daemons in the plugin): each client is held to its share, and
//     two containers hold memory within their shares and compute at once; a
//     client that drops its limit gets the card's largest share (a
//     client's own limit only lowers the server's, so the server's must be
//     the largest); a process outside MPS cannot use the card;
//   - mps in containers (where runc is): two containers run by runc with
//     what the plugin gave them, the card's device nodes given as the
//     NVIDIA runtime would, hold memory within their shares at once; one
//     is refused beyond its share; one without the card's nodes finds no
//     card;
//   - mps (daemons in their own process): a client keeps its memory and
//     computes across a plugin restart.
func TestRealGPU(t *testing.T) {
	n, devs := gpuclient.Open(t, 1024)
	python, mpsControl := gpuclient.Python(), gpuclient.MPSControl()

	t.Run("discovery", func(t *testing.T) {
		drv, err := n.Driver()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("driver %s, CUDA %d", drv.Version, drv.CUDAVersion)
		if drv.Version == "" || drv.CUDAVersion < 1000 {
			t.Errorf("driver %+v: want a version and a CUDA version", drv)
		}
		for _, d := range devs {
			f, err := n.Features(d.UUID)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("GPU %d %s %q %d MiB: MIG %v, compute mode %s, MPS-capable %v", d.Index, d.UUID, d.Model, d.MemoryMiB, f.MIG, f.ComputeMode, f.MPS)
			if !strings.HasPrefix(d.UUID, "GPU-") || d.Model == "" || d.MemoryMiB < 1024 {
				t.Errorf("GPU %d: %+v: want a GPU- UUID, a model and at least 1 GiB", d.Index, d)
			}
			if err := n.Probe(d.UUID); err != nil {
				t.Errorf("Probe: %v", err)
			}
		}
		if err := n.Probe("GPU-00000000-0000-0000-0000-000000000000"); err == nil {
			t.Error("Probe of a UUID no card has: nil error, want one")
		}
	})

	t.Run("health", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		events := make(chan gpu.Event, 16)
		start := time.Now()
		if err := n.WatchXIDs(ctx, events); err != nil {
			t.Fatal(err)
		}
		t.Logf("the XID watch ran %v and ended with its context", time.Since(start).Round(time.Millisecond))
		close(events)
		for e := range events {
			t.Errorf("XID event on an idle card: %+v", e)
		}
	})

	card := devs[0]

	t.Run("xid", func(t *testing.T) {
		// A kernel that writes where nothing is mapped: the driver raises
		// an XID for the card, an application's (31, a page fault), which
		// the watch delivers and which leaves the card healthy.
		_, ctx := ktesting.NewTestContext(t)
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		events := make(chan gpu.Event, 16)
		done := make(chan error, 1)
		go func() { done <- n.WatchXIDs(ctx, events) }()
		// WatchXIDs registers for the cards' events before it waits (a
		// few milliseconds in the health subtest); an event raised before
		// that would be missed.
		time.Sleep(2 * time.Second)
		faulted, msg := gpuclient.Fault(t, python, map[string]string{"CUDA_VISIBLE_DEVICES": card.UUID})
		t.Logf("faulting kernel: faulted=%v %s", faulted, msg)
		if !faulted {
			t.Fatalf("the kernel writing to an unmapped address did not fault: %s", msg)
		}
		select {
		case e := <-events:
			t.Logf("XID event: card %s, XID %d, critical %v", e.UUID, e.XID, gpu.IsCritical(e.XID))
			if e.UUID != card.UUID || gpu.IsCritical(e.XID) {
				t.Errorf("event %+v: want card %s and an application's XID (not critical)", e, card.UUID)
			}
		case err := <-done:
			t.Fatalf("the XID watch ended: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatal("no XID event within 30 s of the fault")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("WatchXIDs: %v", err)
		}
		// The card serves the next process as before.
		if got := gpuclient.Run(t, python, gpuclient.Container{Env: map[string]string{"CUDA_VISIBLE_DEVICES": card.UUID}}, 1); !got.OK {
			t.Errorf("after the fault, 1 GiB on the card: %s; want it allocated", got.Error)
		}
	})

	cardGiB := card.MemoryMiB / 1024
	if cardGiB < 24 {
		t.Fatalf("card 0 has %d GiB; the isolation checks need 24", cardGiB)
	}

	t.Run("none", func(t *testing.T) {
		r := startRealPlugin(t, n, devs, deviceplugin.Config{Isolation: string(isolation.RequestNone)})
		capacity, alloc := r.host.Capacity(resource)
		var want int64
		for _, d := range devs {
			want += d.MemoryMiB / 1024
		}
		if capacity != want || alloc != want {
			t.Errorf("kubelet: capacity %d, allocatable %d; want %d GiB", capacity, alloc, want)
		}
		res := r.admit(t, "none-a", 8)
		if got := res.Env[isolation.EnvIsolation]; got != "none" {
			t.Errorf("%s=%q, want none", isolation.EnvIsolation, got)
		}
		// Advisory: nothing stops the container at its share.
		if got := gpuclient.Run(t, python, container(res), 12); !got.OK {
			t.Errorf("12 GiB under none (share 8 GiB): %s; want it allocated, nothing enforces", got.Error)
		}
	})

	t.Run("driver", func(t *testing.T) {
		_, ctx := ktesting.NewTestContext(t)
		dir := t.TempDir()
		err := runDevicePlugin(ctx, realConfig(t, n, dir, deviceplugin.Config{
			Isolation: string(isolation.RequestDriver), RuntimeCDI: string(isolation.RuntimeCDIOn),
			CDIDir: filepath.Join(dir, "cdi"),
		}))
		if err == nil {
			t.Fatal("Run with --isolation=driver on this node returned nil; want the missing driver support named")
		}
		t.Logf("--isolation=driver refused: %v", err)
		if !strings.Contains(err.Error(), "driver") {
			t.Errorf("the refusal does not say what is missing: %v", err)
		}
	})

	t.Run("mps-in-plugin", func(t *testing.T) {
		root := gpuclient.MPSRoot(t)
		r := startRealPlugin(t, n, devs, deviceplugin.Config{
			Isolation: string(isolation.RequestMPS), MPSControl: mpsControl, MPSRoot: root, MPSDaemons: deviceplugin.MPSDaemonsPlugin,
		})
		small := r.admit(t, "mps-a", 8)
		big := r.admit(t, "mps-b", 16)
		if got := small.Env[isolation.EnvIsolation]; got != "mps" {
			t.Fatalf("%s=%q, want mps", isolation.EnvIsolation, got)
		}
		f, err := n.Features(card.UUID)
		if err != nil {
			t.Fatal(err)
		}
		if f.ComputeMode != gpu.ComputeExclusiveProcess {
			t.Errorf("compute mode %s under mps, want %s", f.ComputeMode, gpu.ComputeExclusiveProcess)
		}
		for _, c := range []struct {
			name string
			c    gpuclient.Container
			gib  float64
			ok   bool
		}{
			{"8 GiB share, 6 GiB", container(small), 6, true},
			{"8 GiB share, 10 GiB", container(small), 10, false},
			{"16 GiB share, 12 GiB", container(big), 12, true},
			{"16 GiB share, 18 GiB", container(big), 18, false},
			// The card's default limit is its largest share.
			{"no limit of its own, 12 GiB", container(small).Without(isolation.EnvMPSPinnedLimit), 12, true},
			{"no limit of its own, 18 GiB", container(small).Without(isolation.EnvMPSPinnedLimit), 18, false},
		} {
			got := gpuclient.Run(t, python, c.c, c.gib)
			t.Logf("%s: ok=%v (cudaMemGetInfo free %d of %d MiB) %s", c.name, got.OK, got.FreeMiB, got.TotalMiB, got.Error)
			if got.OK != c.ok {
				t.Errorf("%s: allocated=%v, want %v (%s)", c.name, got.OK, c.ok, got.Error)
			}
		}
		// The two containers share the card at once: each holds memory
		// within its share while the other does, then both compute on it.
		checkTogether(t, "", python, small, big)
		// A process that does not go through the card's MPS server cannot
		// use the card: it is exclusive to the server.
		outside := gpuclient.Container{Env: map[string]string{"CUDA_VISIBLE_DEVICES": card.UUID, isolation.EnvMPSPipeDir: t.TempDir()}}
		if got := gpuclient.Run(t, python, outside, 1); got.OK {
			t.Error("a process outside MPS allocated on the card, want it refused (exclusive-process)")
		} else {
			t.Logf("a process outside MPS: %s", got.Error)
		}
	})

	t.Run("mps-containers", func(t *testing.T) {
		runc := gpuclient.Runc()
		if runc == "" {
			t.Skipf("no runc (set %s, or put runc in PATH)", gpuclient.EnvRunc)
		}
		root := gpuclient.MPSRoot(t)
		r := startRealPlugin(t, n, devs, deviceplugin.Config{
			Isolation: string(isolation.RequestMPS), MPSControl: mpsControl, MPSRoot: root, MPSDaemons: deviceplugin.MPSDaemonsPlugin,
		})
		small := r.admit(t, "ctr-a", 8)
		big := r.admit(t, "ctr-b", 16)
		// Two containers at once, each within its share.
		checkTogether(t, runc, python, small, big)
		over := gpuclient.StartIn(t, runc, python, container(small), 10, "").Wait(t)
		t.Logf("in a container, 10 GiB on an 8 GiB share: ok=%v %s", over.OK, over.Error)
		if over.OK {
			t.Error("in a container, 10 GiB on an 8 GiB share allocated, want refused")
		}
		// The same container without the card's device nodes (what a
		// container not given the card gets) cannot use it.
		bare := container(small).Without("NVIDIA_VISIBLE_DEVICES")
		none := gpuclient.StartIn(t, runc, python, bare, 1, "").Wait(t)
		t.Logf("in a container without the card's device nodes: ok=%v %s", none.OK, none.Error)
		if none.OK {
			t.Error("a container without the card's device nodes allocated on it, want CUDA to find no card")
		}
	})

	t.Run("mps-daemons-apart", func(t *testing.T) {
		root := gpuclient.MPSRoot(t)
		stopDaemons := startMPSDaemons(t, mpsControl, root)
		defer stopDaemons()
		cfg := deviceplugin.Config{Isolation: string(isolation.RequestMPS), MPSControl: mpsControl, MPSRoot: root, MPSDaemons: deviceplugin.MPSDaemonsExternal}
		r := startRealPlugin(t, n, devs, cfg)
		res := r.admit(t, "apart-a", 8)
		gate := filepath.Join(t.TempDir(), "go")
		client := gpuclient.Start(t, python, container(res), 6, gate)
		gpuclient.WaitFile(t, gate+".ready", 90*time.Second)
		// The plugin restarts (a rollout, a crash): its client goes on.
		if err := r.stop(); err != nil {
			t.Fatalf("stopping the plugin: %v", err)
		}
		time.Sleep(2 * time.Second)
		r2 := startRealPluginOn(t, n, devs, cfg, r.dir, r.host, r.client)
		if err := os.WriteFile(gate, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		got := client.Wait(t)
		t.Logf("client across the plugin restart: ok=%v %s", got.OK, got.Error)
		if !got.OK {
			t.Errorf("the client did not survive the plugin restart: %s", got.Error)
		}
		// The restarted plugin serves new containers on the same daemon.
		res2 := r2.admit(t, "apart-b", 8)
		if got := gpuclient.Run(t, python, container(res2), 10); got.OK {
			t.Error("after the restart: 10 GiB on an 8 GiB share allocated, want refused")
		}
	})
}

// realPlugin is the device plugin on the real cards under kubelet's device
// manager.
type realPlugin struct {
	*env
	stop func() error
}

func realConfig(t *testing.T, n *gpu.NVML, dir string, c deviceplugin.Config) deviceplugin.Config {
	t.Helper()
	c.NodeName = nodeName
	c.Unit = gpushare.UnitGiB
	c.DeviceListStrategy = deviceplugin.StrategyEnvvar
	c.HealthCheck = true
	c.KubeletDir = dir
	c.VerifyPeriod = 200 * time.Millisecond
	c.GPUs = n
	if c.Client == nil {
		c.Client = fake.NewClientset(util.MakeNode(nodeName).Obj())
	}
	return c
}

// startRealPlugin starts kubelet's device manager and the plugin with c.
func startRealPlugin(t *testing.T, n *gpu.NVML, devs []gpu.Device, c deviceplugin.Config) *realPlugin {
	t.Helper()
	_, dir, host := startDeviceManager(t, false)
	return startRealPluginOn(t, n, devs, c, dir, host, fake.NewClientset(util.MakeNode(nodeName).Obj()))
}

// startRealPluginOn starts the plugin with c on a running device manager.
func startRealPluginOn(t *testing.T, n *gpu.NVML, devs []gpu.Device, c deviceplugin.Config, dir string, host *devicehost.Host, client *fake.Clientset) *realPlugin {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	e := &env{t: t, ctx: ctx, dir: dir, host: host, client: client, cards: devs}
	c.Client = client
	c = realConfig(t, n, dir, c)
	ready := make(chan *handoff.Handoff, 1)
	done := make(chan error, 1)
	c.OnReady = func(h *handoff.Handoff) { ready <- h }
	go func() { done <- runDevicePlugin(ctx, c) }()
	select {
	case e.handoff = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("Run ended before serving: %v", err)
	}
	stopped := false
	var runErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	if err := host.WaitForResource(e.deadline(30*time.Second), resource, e.totalUnits()); err != nil {
		t.Fatal(err)
	}
	return &realPlugin{env: e, stop: stop}
}

// admit binds a one-container pod asking gib GiB to card 0 and admits it:
// what the container gets.
func (r *realPlugin) admit(t *testing.T, name string, gib int64) devicehost.Result {
	t.Helper()
	pod := r.bind(util.MakePod(name).GPUMem(gib), map[string][]int{"c0": {0}}, time.Now())
	res, err := r.host.Admit(pod)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pod %s (%d GiB): env %v, mounts %v", name, gib, res["c0"].Env, res["c0"].Mounts)
	return res["c0"]
}

// startMPSDaemons runs the daemons' side over root: the plugin binary's
// mps-daemons command when GPUSHARE_REAL_GPU_PLUGIN names one, else
// isolation.MPSDaemons in this process.
func startMPSDaemons(t *testing.T, control, root string) (stop func()) {
	t.Helper()
	bin := os.Getenv(envRealGPUPlugin)
	if bin == "" {
		_, ctx := ktesting.NewTestContext(t)
		return isolation.StartMPSDaemons(ctx, isolation.MPSDaemonsConfig{Control: control, Root: root})
	}
	cmd := exec.Command(bin, deviceplugin.MPSDaemonsCommand, "--mps-root", root, "--mps-control", control, "-v", "2")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("mps-daemons: pid %d", cmd.Process.Pid)
	return func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}
}

// checkTogether runs clients of 6 GiB on the 8 GiB share small and 12
// GiB on the 16 GiB share big at once (in runc's containers when runc is
// not ""): both must hold their memory together and compute.
func checkTogether(t *testing.T, runc, python string, small, big devicehost.Result) {
	t.Helper()
	where := map[bool]string{true: "in containers", false: "on the host"}[runc != ""]
	for i, got := range gpuclient.Together(t, runc, python, []gpuclient.Container{container(small), container(big)}, []float64{6, 12}) {
		t.Logf("%s, together, client %d: ok=%v (cudaMemGetInfo free %d of %d MiB) %s", where, i, got.OK, got.FreeMiB, got.TotalMiB, got.Error)
		if !got.OK {
			t.Errorf("%s, together, client %d (6 of 8 GiB, 12 of 16 GiB): %s; want both to hold their memory and compute", where, i, got.Error)
		}
	}
}

// container is what a container admitted with res gets.
func container(res devicehost.Result) gpuclient.Container {
	c := gpuclient.Container{Env: res.Env}
	for _, m := range res.Mounts {
		c.Mounts = append(c.Mounts, gpuclient.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: m.ReadOnly})
	}
	return c
}
