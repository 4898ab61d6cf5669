package isolation

import (
	"cmp"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// GPUs is what Setup reads and sets on the cards; gpu.NVML and gpu.Fake
// implement it.
type GPUs interface {
	Host
	ComputeModes
}

var (
	_ GPUs = (*gpu.NVML)(nil)
	_ GPUs = (*gpu.Fake)(nil)
)

// Where mps mode's daemon side, MPSDaemons, runs: the --mps-daemons of the
// device plugin and of the DRA driver.
const (
	// MPSDaemonsPlugin runs it in the plugin's or driver's own process. The
	// daemons and their clients' CUDA work stop with it.
	MPSDaemonsPlugin = "plugin"
	// MPSDaemonsExternal leaves it to `gpushare-device-plugin
	// mps-daemons`, in a container of its own, which serves --mps-root. The
	// daemons outlive restarts of the plugin or driver.
	MPSDaemonsExternal = "external"
)

// CheckMPSDaemons returns an error unless where is MPSDaemonsPlugin or
// MPSDaemonsExternal.
func CheckMPSDaemons(where string) error {
	if where != MPSDaemonsPlugin && where != MPSDaemonsExternal {
		return fmt.Errorf("--mps-daemons %q: want %s or %s", where, MPSDaemonsPlugin, MPSDaemonsExternal)
	}
	return nil
}

// SetupConfig is what Setup needs: the --isolation request and the paths
// of the modes, from the device plugin's or the DRA driver's flags.
type SetupConfig struct {
	// Node is the node's name, for errors.
	Node string
	// Request is the --isolation value (ParseRequest).
	Request string
	// Fake is set on a fake node. FakeDriver states its cgroup version, and
	// the plugin's own CAP_SYS_ADMIN and /dev/shm are not checked.
	Fake       bool
	FakeDriver string
	// CgroupRoot is where the node's cgroup hierarchy is mounted;
	// DefaultCgroupRoot when empty.
	CgroupRoot string
	// MPSControl, MPSRoot: mps mode's binary and directories.
	MPSControl, MPSRoot string
	// CDIDir, CDIHook: driver mode's spec directory and hook.
	CDIDir, CDIHook string
	// RuntimeCDIErr says why the container runtime would not apply CDI
	// devices, nil when it would. Without them there is no driver mode.
	RuntimeCDIErr error
	// MPSDaemonsInProcess runs mps mode's daemon side, MPSDaemons, in this
	// process. false leaves it to the device plugin's mps-daemons command in
	// its own container, so that the daemons outlive this one.
	MPSDaemonsInProcess bool
	// OnMPSRestart, when set, is called each time a crashed MPS daemon run
	// in this process is restarted.
	OnMPSRestart func(uuid string, err error)
}

// Setup detects what the node supports and chooses each card's mode for
// cfg.Request. It fails, naming what is missing, when an explicit mode
// cannot be enforced. It logs the choice and starts what the modes need:
// driver mode's CDI spec and mps mode's daemon manager. It returns the modes
// in devs' order; stop ends the MPS daemons. The device plugin and the DRA
// driver both set up their cards' isolation with it.
func Setup(ctx context.Context, cfg SetupConfig, gpus GPUs, devs []gpu.Device) (e *Enforcer, modes []gpushare.Isolation, stop func(), err error) {
	logger := klog.FromContext(ctx)
	req, err := ParseRequest(cfg.Request)
	if err != nil {
		return nil, nil, nil, err
	}
	cg, err := cgroupsOf(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	caps := Detect(gpus, cg, exec.LookPath, cfg.MPSControl, devs)
	caps.RuntimeCDIErr = cfg.RuntimeCDIErr
	if !cfg.Fake {
		// What mps needs of the plugin's own container. A fake node states
		// its support with --fake-driver instead.
		admin, err := SysAdmin(ProcSelfStatus)
		if err != nil {
			logger.Error(err, "Assuming no CAP_SYS_ADMIN: mps takes only cards already in EXCLUSIVE_PROCESS")
		}
		caps.ComputeModeLocked = !admin
		caps.MPSShmErr = CheckMPSShm(DevShm, cfg.MPSRoot)
	}
	modes, err = Choose(req, &caps)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w (on node %s; choose --isolation=auto to take what each card supports, or none)", err, cfg.Node)
	}
	logger.Info("Memory isolation", "requested", req, "driver", caps.Driver.Version, "cudaVersion", caps.Driver.CUDAVersion,
		"cgroupV2", caps.CgroupV2, "mpsControl", caps.MPSControl)
	var need struct{ driver, mps bool }
	var cards []Card
	whole := map[int]int64{}
	for i, d := range devs {
		m := modes[i]
		if why := WhyNot(&caps, i, m); why != "" {
			logger.Info("GPU memory isolation", "index", d.Index, "uuid", d.UUID, "mode", m, "notStronger", why)
		} else {
			logger.Info("GPU memory isolation", "index", d.Index, "uuid", d.UUID, "mode", m)
		}
		switch m {
		case gpushare.IsolationDriver:
			need.driver = true
			whole[d.Index] = d.MemoryMiB
		case gpushare.IsolationMPS:
			need.mps = true
		}
		cards = append(cards, Card{Card: d.Card, Mode: m})
	}
	var spec *CDISpec
	if need.driver {
		if spec, err = NewCDISpec(cfg.CDIDir, cfg.CDIHook, whole); err != nil {
			return nil, nil, nil, err
		}
		logger.Info("Driver-mode CDI spec written", "path", spec.Path(), "kind", CDIKind, "hook", cfg.CDIHook)
	}
	var mps *MPS
	stop = func() {}
	if need.mps {
		mps = NewMPS(MPSConfig{Root: cfg.MPSRoot, GPUs: gpus})
		if cfg.MPSDaemonsInProcess {
			stop = StartMPSDaemons(ctx, MPSDaemonsConfig{Control: caps.MPSControl, Root: cfg.MPSRoot, OnRestart: cfg.OnMPSRestart})
		} else {
			logger.Info("MPS control daemons run in their own container", "root", cfg.MPSRoot)
		}
	}
	e, err = NewEnforcer(cards, spec, mps)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return e, modes, stop, nil
}

// CheckPaths returns an error for each of the modes' paths that is not
// absolute, named by its flag: --cdi-dir, --cdi-hook or --mps-root, of the
// device plugin or the DRA driver. It also returns one for an --mps-root
// too long for MPS, by CheckMPSRoot.
func CheckPaths(cdiDir, cdiHook, mpsRoot string) []error {
	var errs []error
	for _, f := range []struct{ flag, path string }{{"--cdi-dir", cdiDir}, {"--cdi-hook", cdiHook}, {"--mps-root", mpsRoot}} {
		if !filepath.IsAbs(f.path) {
			errs = append(errs, fmt.Errorf("%s %q must be absolute", f.flag, f.path))
		}
	}
	if err := CheckMPSRoot(mpsRoot); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// MaxMPSPipeDirLen is the longest MPS pipe directory, in bytes, known to
// work. The control daemon keeps unix sockets in it, whose paths have a
// 108-byte limit. docs/memory-isolation.md has the real-card check that set
// it.
const MaxMPSPipeDirLen = 84

// CheckMPSRoot returns an error when a card's pipe directory under
// mpsRoot, <root>/GPU-<UUID>/pipe, would be longer than MaxMPSPipeDirLen.
func CheckMPSRoot(mpsRoot string) error {
	pipe := len(filepath.Clean(mpsRoot)) + len("/GPU-00000000-0000-0000-0000-000000000000/pipe")
	if pipe > MaxMPSPipeDirLen {
		return fmt.Errorf("--mps-root %q is too long: a card's MPS pipe directory under it would be %d bytes, and the MPS control daemon "+
			"exits at start with one over %d (its socket paths have a 108-byte limit); use at most %d bytes, e.g. %s",
			mpsRoot, pipe, MaxMPSPipeDirLen, MaxMPSPipeDirLen-(pipe-len(filepath.Clean(mpsRoot))), DefaultMPSRoot)
	}
	return nil
}

// StartMPSDaemons runs the daemon side, MPSDaemons, over cfg.Root in this
// process until the returned stop is called, which quits the daemons.
func StartMPSDaemons(ctx context.Context, cfg MPSDaemonsConfig) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	d := NewMPSDaemons(ctx, cfg)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			klog.FromContext(ctx).Error(err, "Stopping the MPS control daemons")
		}
	}
}

// cgroupsOf returns how Setup learns the node's cgroup version: stated by
// a fake node's driver, else read from the hierarchy at cfg.CgroupRoot. An
// empty root reads DefaultCgroupRoot, so a caller that sets none, such as a
// test building its own SetupConfig, still reads the node's.
func cgroupsOf(cfg SetupConfig) (Cgroups, error) {
	if cfg.Fake {
		fd, err := gpu.ParseFakeDriver(cfg.FakeDriver)
		if err != nil {
			return nil, err
		}
		return FixedCgroups{V2: !fd.CgroupV1}, nil
	}
	return SysCgroups{Root: cmp.Or(cfg.CgroupRoot, DefaultCgroupRoot)}, nil
}
