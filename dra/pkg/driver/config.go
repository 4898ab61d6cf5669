package driver

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/isolation"
)

// Defaults of Config.
const (
	DefaultKubeletDir = "/var/lib/kubelet"
	// DefaultReconcilePeriod is how often the prepared claims are checked
	// against the API (prepare.State.Reconcile).
	DefaultReconcilePeriod = 5 * time.Minute
	// fakeControlPeriod is how often Config.FakeControl is polled.
	fakeControlPeriod = 250 * time.Millisecond
)

// GPUs is what the driver needs from the host's GPUs (gpu.NVML, gpu.Fake).
type GPUs = gpu.GPUs

// Config is the driver's configuration, as set by its flags, plus optional
// dependencies that tests inject.
type Config struct {
	// NodeName is the node the driver runs on (--node-name, NODE_NAME); its
	// pool's name.
	NodeName string
	// Kubeconfig path; empty for in-cluster configuration.
	Kubeconfig string
	// Unit the memory capacity counts in: gpushare.UnitGiB or
	// gpushare.UnitMiB (the request step and the smallest request).
	Unit string
	// Order is the order of the devices in the slice (devices.Orders).
	Order devices.Order
	// HealthCheck watches XID events and taints unhealthy cards.
	HealthCheck bool
	// RecoveryWindow: how long an unhealthy card must go without a
	// critical XID before it may come back; gpu.DefaultRecoveryWindow if
	// not positive.
	RecoveryWindow time.Duration
	// KubeletDir holds plugins/ and plugins_registry/.
	KubeletDir string
	// FakeGPUs, when set, replaces NVML with cards from this spec
	// (gpu.ParseFakeGPUs).
	FakeGPUs string
	// FakeDriver states what the fake node's driver supports
	// (gpu.ParseFakeDriver).
	FakeDriver string
	// FakeControl, test-only and only with fake GPUs, is a file polled
	// for commands that inject XIDs or probe failures (gpu.Fake.Apply).
	FakeControl string
	// Isolation is --isolation: auto, driver, mps or none.
	Isolation string
	// CDIDir is where the claims' CDI specs and driver mode's limit spec
	// are written.
	CDIDir string
	// CDIHook is the NVIDIA container toolkit's nvidia-cdi-hook.
	CDIHook string
	// MPSControl is nvidia-cuda-mps-control: a name looked up in PATH, or
	// a path.
	MPSControl string
	// MPSRoot holds each MPS card's pipe and log directories.
	MPSRoot string
	// MPSDaemons is where mps mode's daemons run. With
	// isolation.MPSDaemonsPlugin, the default when empty, they run in this
	// process, and they and their clients' work stop with it. With
	// isolation.MPSDaemonsExternal, the device plugin's mps-daemons command
	// serves MPSRoot from its own container.
	MPSDaemons string
	// CgroupRoot is where the node's cgroup hierarchy is mounted.
	CgroupRoot string
	// QPS and Burst of the API client.
	QPS   float32
	Burst int
	// ReconcilePeriod is how often the prepared claims are checked
	// against the API, after the check at the start;
	// DefaultReconcilePeriod if not positive.
	ReconcilePeriod time.Duration

	// Client, when set, is used instead of one built from Kubeconfig.
	Client kubernetes.Interface
	// GPUs, when set, is used instead of NVML or FakeGPUs.
	GPUs GPUs
	// RegistrationDisabled serves no kubelet registration socket: for
	// tests that call the plugin's socket themselves and have no kubelet.
	RegistrationDisabled bool
	// OnReady, when set, is called with the driver once it serves and has
	// published its devices.
	OnReady func(*Driver)
}

// PluginDataDir is where the driver's socket and checkpoint live:
// <KubeletDir>/plugins/gpu.gpushare.io.
func (c *Config) PluginDataDir() string {
	return filepath.Join(c.KubeletDir, "plugins", devices.DriverName)
}

// RegistryDir is kubelet's plugin registration directory.
func (c *Config) RegistryDir() string { return filepath.Join(c.KubeletDir, "plugins_registry") }

// Validate checks the configuration and fills in defaults.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("--node-name (or NODE_NAME) is required"))
	}
	switch c.Unit {
	case "":
		c.Unit = gpushare.DefaultUnit
	case gpushare.UnitGiB, gpushare.UnitMiB:
	default:
		errs = append(errs, fmt.Errorf("--memory-unit %q: want %s or %s", c.Unit, gpushare.UnitGiB, gpushare.UnitMiB))
	}
	if c.Order == "" {
		c.Order = devices.DefaultOrder
	}
	if _, err := devices.ParseOrder(string(c.Order)); err != nil {
		errs = append(errs, err)
	}
	if c.Isolation == "" {
		c.Isolation = string(isolation.RequestAuto)
	}
	if _, err := isolation.ParseRequest(c.Isolation); err != nil {
		errs = append(errs, err)
	}
	if c.KubeletDir == "" {
		c.KubeletDir = DefaultKubeletDir
	}
	if c.CDIDir == "" {
		c.CDIDir = isolation.DefaultCDIDir
	}
	if c.CDIHook == "" {
		c.CDIHook = isolation.DefaultCDIHook
	}
	if c.MPSControl == "" {
		c.MPSControl = isolation.DefaultMPSControl
	}
	if c.MPSRoot == "" {
		c.MPSRoot = isolation.DefaultMPSRoot
	}
	if c.MPSDaemons == "" {
		c.MPSDaemons = isolation.MPSDaemonsPlugin
	}
	if err := isolation.CheckMPSDaemons(c.MPSDaemons); err != nil {
		errs = append(errs, err)
	}
	if c.ReconcilePeriod <= 0 {
		c.ReconcilePeriod = DefaultReconcilePeriod
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = isolation.DefaultCgroupRoot
	}
	errs = append(errs, isolation.CheckPaths(c.CDIDir, c.CDIHook, c.MPSRoot)...)
	if !filepath.IsAbs(c.KubeletDir) {
		errs = append(errs, fmt.Errorf("--kubelet-dir %q must be absolute", c.KubeletDir))
	}
	if c.FakeDriver != "" {
		if c.FakeGPUs == "" {
			errs = append(errs, errors.New("--fake-driver needs --fake-gpus: it describes fake cards only"))
		}
		if _, err := gpu.ParseFakeDriver(c.FakeDriver); err != nil {
			errs = append(errs, err)
		}
	}
	if c.FakeControl != "" && c.FakeGPUs == "" && c.GPUs == nil {
		errs = append(errs, errors.New("--fake-control needs --fake-gpus"))
	}
	return errors.Join(errs...)
}
