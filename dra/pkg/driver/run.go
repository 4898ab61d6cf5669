package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/dra/pkg/nodepods"
	"github.com/gpushare/gpushare/dra/pkg/prepare"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/isolation"
	"github.com/gpushare/gpushare/pkg/kubeclient"
)

// Run runs the driver until ctx ends or a fatal error. It discovers the
// node's cards and chooses their isolation. It follows the node's pods:
// what the device plugin's pods still hold comes off the cards' capacity. It
// restores the prepared claims from the checkpoint and serves kubelet's DRA
// plugin service, registering with kubelet unless cfg.RegistrationDisabled.
// It publishes the node's ResourceSlice and taints the devices of cards a
// critical XID made unhealthy. It drops prepared claims the API no longer
// allocates here (prepare.State.Reconcile).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("node", cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)

	gpus, closeGPUs, err := openGPUs(cfg)
	if err != nil {
		return err
	}
	defer closeGPUs()
	cards, info, enforcer, stopIsolation, err := setupCards(ctx, cfg, gpus)
	if err != nil {
		return err
	}
	defer stopIsolation()

	client := cfg.Client
	if client == nil {
		if client, err = kubeclient.New(cfg.Kubeconfig, cfg.QPS, cfg.Burst, "gpushare-dra-driver"); err != nil {
			return err
		}
	}
	// The device plugin's pods still on the node (it moved from the
	// device plugin) are known before anything is published or prepared.
	pods := nodepods.New(cfg.NodeName, cards)
	var served atomic.Pointer[Driver]
	logger.V(2).Info("Listing the node's pods")
	if err := pods.Start(ctx, client, func(map[string]int64) {
		if d := served.Load(); d != nil {
			d.HeldChanged(ctx)
		}
	}); err != nil {
		return err
	}
	// The plugin's socket and checkpoint live here; kubelet makes only
	// its plugins/ directory.
	if err := os.MkdirAll(cfg.PluginDataDir(), 0o750); err != nil {
		return fmt.Errorf("creating the plugin's data directory: %w", err)
	}
	specs, err := prepare.NewClaimSpecs(cfg.CDIDir)
	if err != nil {
		return err
	}
	state, err := prepare.New(prepare.Config{Pool: cfg.NodeName, Unit: cfg.Unit, Cards: cards, CheckpointDir: cfg.PluginDataDir(), Specs: specs, Enforcer: enforcer, Held: pods})
	if err != nil {
		return err
	}
	if err := state.Restore(ctx); err != nil {
		return err
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	driver := New(cfg.NodeName, cards, cfg.Order, info, state, pods, cancel)
	served.Store(driver)
	driver.HeldChanged(ctx)
	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(devices.DriverName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(cfg.NodeName),
		kubeletplugin.PluginDataDirectoryPath(cfg.PluginDataDir()),
		kubeletplugin.RegistrarDirectoryPath(cfg.RegistryDir()),
		kubeletplugin.RegistrationService(!cfg.RegistrationDisabled),
		// State serializes the capacity check and the checkpoint, and no
		// more: a claim waiting for its card's MPS daemon must not hold up
		// the claims of other cards.
		kubeletplugin.Serialize(false),
	)
	if err != nil {
		return fmt.Errorf("starting the kubelet plugin %s: %w", devices.DriverName, err)
	}
	defer helper.Stop()
	if err := driver.SetPublisher(ctx, helper); err != nil {
		return err
	}
	logger.Info("Serving", "driver", devices.DriverName, "socket", cfg.PluginDataDir(), "order", cfg.Order, "cards", len(cards))

	var wg sync.WaitGroup
	defer func() { cancel(nil); wg.Wait() }()
	wg.Go(func() { watchHealth(ctx, cfg, gpus, cards, driver) })
	wg.Go(func() { reconcileClaims(ctx, state, client, pods, cfg.ReconcilePeriod) })
	if cfg.OnReady != nil {
		cfg.OnReady(driver)
	}
	<-ctx.Done()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// setupCards discovers the node's cards and sets up their isolation: it
// returns the cards with their modes, what the devices publish besides,
// the enforcer and the function that stops the isolation.
func setupCards(ctx context.Context, cfg Config, gpus GPUs) ([]devices.Card, devices.Info, *isolation.Enforcer, func(), error) {
	logger := klog.FromContext(ctx)
	devs, err := gpus.Devices()
	if err != nil {
		return nil, devices.Info{}, nil, nil, fmt.Errorf("discovering GPUs: %w", err)
	}
	cards, err := devices.CardsOf(cfg.NodeName, devs, cfg.Unit, gpus)
	if err != nil {
		return nil, devices.Info{}, nil, nil, err
	}
	enforcer, modes, stop, err := isolation.Setup(ctx, isolation.SetupConfig{
		Node: cfg.NodeName, Request: cfg.Isolation, Fake: cfg.FakeGPUs != "", FakeDriver: cfg.FakeDriver,
		CgroupRoot: cfg.CgroupRoot, MPSControl: cfg.MPSControl, MPSRoot: cfg.MPSRoot, CDIDir: cfg.CDIDir, CDIHook: cfg.CDIHook,
		MPSDaemonsInProcess: cfg.MPSDaemons == isolation.MPSDaemonsPlugin,
	}, gpus, devs)
	if err != nil {
		return nil, devices.Info{}, nil, nil, err
	}
	for i := range cards {
		cards[i].Isolation = modes[i]
		c := cards[i]
		logger.Info("GPU", "device", c.DeviceName(), "uuid", c.UUID, "model", c.Model, "memoryMiB", c.MemoryMiB, "capacityMiB", c.CapacityMiB, "isolation", c.Isolation)
	}
	info := devices.Info{Unit: cfg.Unit}
	if drv, err := gpus.Driver(); err == nil {
		info.DriverVersion = drv.Version
	}
	return cards, info, enforcer, stop, nil
}

// watchHealth taints the devices of cards a critical XID made unhealthy
// until ctx ends. With --health-check=false it does nothing.
func watchHealth(ctx context.Context, cfg Config, gpus GPUs, cards []devices.Card, driver *Driver) {
	logger := klog.FromContext(ctx)
	if !cfg.HealthCheck {
		logger.Info("Health checks disabled (--health-check=false): no card is ever tainted")
		return
	}
	uuids := make([]string, len(cards))
	for i, c := range cards {
		uuids[i] = c.UUID
	}
	health := gpu.NewHealth(uuids, cfg.RecoveryWindow, nil)
	if f, ok := gpus.(*gpu.Fake); ok && cfg.FakeControl != "" {
		logger.Info("Following the fake-GPU control file (test-only)", "path", cfg.FakeControl)
		go f.FollowControl(ctx, cfg.FakeControl, fakeControlPeriod)
	}
	health.Watch(ctx, gpus, func() { driver.SetUnhealthy(ctx, health.Unhealthy()) })
}

// reconcileClaims drops prepared claims the API no longer allocates here,
// with prepare.State.Reconcile, at once and then every period until ctx
// ends.
func reconcileClaims(ctx context.Context, state *prepare.State, client kubernetes.Interface, users prepare.ClaimUsers, period time.Duration) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if _, err := state.Reconcile(ctx, prepare.APIClaims{Client: client}, users); err != nil && ctx.Err() == nil {
			logger.Error(err, "Checking the prepared claims against the API")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// openGPUs returns the configured GPUs and a function that releases them.
func openGPUs(cfg Config) (GPUs, func(), error) {
	if cfg.GPUs != nil {
		return cfg.GPUs, func() {}, nil
	}
	return gpu.Open(cfg.FakeGPUs, cfg.FakeDriver, cfg.NodeName)
}
