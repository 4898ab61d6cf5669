package deviceplugin

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/isolation"
)

// Defaults of Config.
const (
	DefaultKubeletDir   = "/var/lib/kubelet"
	DefaultVerifyPeriod = 10 * time.Second
	// DefaultIsolation: the strongest mode each card supports. A node that
	// can enforce does without being told. One that cannot still serves,
	// advisory, and says so at startup, in the inventory and in each
	// container's GPUSHARE_ISOLATION.
	DefaultIsolation = string(isolation.RequestAuto)
	// fakeControlPeriod is how often Config.FakeControl is polled.
	fakeControlPeriod = 250 * time.Millisecond
)

// GPUs is what the plugin needs from the host's GPUs (gpu.NVML, gpu.Fake).
type GPUs = gpu.GPUs

// Config is the device plugin's configuration, as set by its flags, plus
// optional dependencies that tests inject.
type Config struct {
	// NodeName is the node this plugin runs on (--node-name, NODE_NAME).
	NodeName string
	// Kubeconfig path; empty for in-cluster configuration.
	Kubeconfig string
	// Unit of aliyun.com/gpu-mem: gpushare.UnitGiB or gpushare.UnitMiB.
	Unit string
	// DeviceListStrategy: one of Strategies.
	DeviceListStrategy string
	// HealthCheck watches XID events and marks cards unhealthy.
	HealthCheck bool
	// RecoveryWindow: how long an unhealthy card must go without a
	// critical XID before it may come back (gpu.DefaultRecoveryWindow if
	// not positive).
	RecoveryWindow time.Duration
	// KubeletDir holds device-plugins/ and pod-resources/.
	KubeletDir string
	// FakeGPUs, when set, replaces NVML with cards from this spec
	// (gpu.ParseFakeGPUs).
	FakeGPUs string
	// FakeDriver states what the fake node's driver supports
	// (gpu.ParseFakeDriver); empty: no driver, so no enforcement.
	FakeDriver string
	// Isolation is --isolation: auto, driver, mps or none
	// (isolation.Requests; DefaultIsolation if empty).
	Isolation string
	// CDIDir is where driver mode writes its CDI spec.
	CDIDir string
	// CDIHook is the NVIDIA container toolkit's nvidia-cdi-hook.
	CDIHook string
	// RuntimeCDI is --runtime-cdi: whether the node's container runtime
	// applies CDI devices (isolation.RuntimeCDI; auto if empty: by the
	// Node's status.nodeInfo.containerRuntimeVersion).
	RuntimeCDI string
	// MPSControl is nvidia-cuda-mps-control (a name looked up in PATH, or
	// a path).
	MPSControl string
	// MPSRoot holds each MPS card's pipe and log directories.
	MPSRoot string
	// MPSDaemons is where mps mode's daemons run. With MPSDaemonsPlugin,
	// the default when empty, they run in this process and stop with it.
	// With MPSDaemonsExternal, the mps-daemons command serves MPSRoot from
	// its own container.
	MPSDaemons string
	// CgroupRoot is where the node's cgroup hierarchy is mounted.
	CgroupRoot string
	// FakeControl, test-only and only with fake GPUs, is a file polled
	// for commands that inject XIDs or probe failures (gpu.Fake.Apply).
	FakeControl string
	// VerifyPeriod is how often kubelet's PodResources is compared with
	// the annotations (DefaultVerifyPeriod if 0).
	VerifyPeriod time.Duration
	// IdleTaintMinCards: a node of at least this many cards carries the
	// gpushare.io/idle-gpus taint while none of its pods asks GPU memory
	// (IdleTaint); 0 keeps no such taint.
	IdleTaintMinCards int
	// QPS and Burst of the API client.
	QPS   float32
	Burst int
	// MetricsListen, when set, serves /metrics and /healthz over plain
	// HTTP on this address (see Metrics).
	MetricsListen string

	// Client, when set, is used instead of one built from Kubeconfig.
	Client kubernetes.Interface
	// GPUs, when set, is used instead of NVML or FakeGPUs.
	GPUs GPUs
	// Restart makes the plugin serve and register again (SIGHUP).
	Restart <-chan struct{}
	// OnReady, when set, is called with the handoff once the informer has
	// synced, before the plugin first registers.
	OnReady func(*handoff.Handoff)
}

// PluginDir is kubelet's device-plugins directory.
func (c *Config) PluginDir() string { return filepath.Join(c.KubeletDir, "device-plugins") }

// PodResourcesSocket is kubelet's PodResources socket.
func (c *Config) PodResourcesSocket() string {
	return filepath.Join(c.KubeletDir, "pod-resources", "kubelet.sock")
}

// Validate checks the configuration and fills in defaults.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("--node-name (or NODE_NAME) is required"))
	}
	if c.Unit != gpushare.UnitGiB && c.Unit != gpushare.UnitMiB {
		errs = append(errs, fmt.Errorf("--memory-unit %q: want %s or %s", c.Unit, gpushare.UnitGiB, gpushare.UnitMiB))
	}
	if !slices.Contains(Strategies, c.DeviceListStrategy) {
		errs = append(errs, fmt.Errorf("--device-list-strategy %q: want one of %s", c.DeviceListStrategy, strings.Join(Strategies, ", ")))
	}
	if c.Isolation == "" {
		c.Isolation = DefaultIsolation
	}
	if _, err := isolation.ParseRequest(c.Isolation); err != nil {
		errs = append(errs, err)
	}
	if c.CDIDir == "" {
		c.CDIDir = isolation.DefaultCDIDir
	}
	if c.CDIHook == "" {
		c.CDIHook = isolation.DefaultCDIHook
	}
	if c.RuntimeCDI == "" {
		c.RuntimeCDI = string(isolation.RuntimeCDIAuto)
	}
	if _, err := isolation.ParseRuntimeCDI(c.RuntimeCDI); err != nil {
		errs = append(errs, err)
	}
	if c.MPSControl == "" {
		c.MPSControl = isolation.DefaultMPSControl
	}
	if c.MPSRoot == "" {
		c.MPSRoot = isolation.DefaultMPSRoot
	}
	if c.MPSDaemons == "" {
		c.MPSDaemons = MPSDaemonsPlugin
	}
	if err := isolation.CheckMPSDaemons(c.MPSDaemons); err != nil {
		errs = append(errs, err)
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = isolation.DefaultCgroupRoot
	}
	errs = append(errs, isolation.CheckPaths(c.CDIDir, c.CDIHook, c.MPSRoot)...)
	if c.FakeDriver != "" {
		if c.FakeGPUs == "" {
			errs = append(errs, errors.New("--fake-driver needs --fake-gpus: it describes fake cards only"))
		}
		if _, err := gpu.ParseFakeDriver(c.FakeDriver); err != nil {
			errs = append(errs, err)
		}
	}
	if c.FakeControl != "" && c.FakeGPUs == "" && c.GPUs == nil {
		errs = append(errs, errors.New("--fake-control needs --fake-gpus: it drives fake cards only"))
	}
	if c.KubeletDir == "" {
		c.KubeletDir = DefaultKubeletDir
	}
	if !filepath.IsAbs(c.KubeletDir) {
		errs = append(errs, fmt.Errorf("--kubelet-dir %q must be absolute", c.KubeletDir))
	}
	if c.VerifyPeriod <= 0 {
		c.VerifyPeriod = DefaultVerifyPeriod
	}
	if c.RecoveryWindow <= 0 {
		c.RecoveryWindow = gpu.DefaultRecoveryWindow
	}
	if c.IdleTaintMinCards < 0 {
		errs = append(errs, fmt.Errorf("--idle-taint-min-cards %d: want 0 (no taint) or more", c.IdleTaintMinCards))
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-listen %q: %w", c.MetricsListen, err))
		}
	}
	if c.Client == nil && (c.QPS <= 0 || c.Burst <= 0) {
		errs = append(errs, fmt.Errorf("--kube-api-qps (%v) and --kube-api-burst (%d) must be positive", c.QPS, c.Burst))
	}
	return errors.Join(errs...)
}
