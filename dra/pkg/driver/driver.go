package driver

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/dra/pkg/checkpoint"
	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/dra/pkg/prepare"
)

// healthResend is how often WatchHealthStatus repeats its report when
// nothing changes: within kubelet's 30 s, after which it takes a device's
// health as unknown.
const healthResend = 20 * time.Second

// Publisher publishes the driver's ResourceSlices (kubeletplugin.Helper).
type Publisher interface {
	PublishResources(ctx context.Context, resources resourceslice.DriverResources) error
}

var _ Publisher = (*kubeletplugin.Helper)(nil)

// HeldMemory is what the device plugin's pods still running on the node
// hold on its cards (nodepods.Watcher).
type HeldMemory interface {
	// Held returns card UUID -> MiB.
	Held() map[string]int64
	// HeldPods returns those pods, as namespace/name.
	HeldPods() []string
}

// Driver implements kubelet's DRA plugin service over a State, and keeps
// the node's ResourceSlice in step with its cards' health and with what
// the device plugin's pods still hold on them.
type Driver struct {
	node  string
	cards []devices.Card
	order devices.Order
	state *prepare.State
	// held is what the device plugin's pods hold; nil: nothing.
	held HeldMemory
	// fail ends the driver with a fatal background error (HandleError).
	fail func(error)

	mu sync.Mutex
	// info is what the devices publish besides their cards; Unhealthy
	// changes with SetUnhealthy, Held with HeldChanged.
	info devices.Info
	// publisher is set once the plugin serves (SetPublisher).
	publisher Publisher
	// healthChanged is closed and replaced on every health change, waking
	// WatchHealthStatus.
	healthChanged chan struct{}
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New returns a driver for a node's cards over state. It publishes them
// less what held says the device plugin's pods hold; nil holds nothing.
// fail is called with errors that should end the driver.
func New(node string, cards []devices.Card, order devices.Order, info devices.Info, state *prepare.State, held HeldMemory, fail func(error)) *Driver {
	if info.Unhealthy == nil {
		info.Unhealthy = map[string]bool{}
	}
	return &Driver{node: node, cards: cards, order: order, info: info, state: state, held: held, fail: fail, healthChanged: make(chan struct{})}
}

// State is the driver's record of prepared claims.
func (d *Driver) State() *prepare.State { return d.state }

// Resources returns the node's pool: one slice with a device per card, in
// the driver's order, tainted where unhealthy.
func (d *Driver) Resources() resourceslice.DriverResources {
	d.mu.Lock()
	defer d.mu.Unlock()
	return resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.node: {Slices: []resourceslice.Slice{{Devices: devices.List(d.cards, d.order, d.info)}}},
	}}
}

// SetPublisher sets where Publish writes, and publishes.
func (d *Driver) SetPublisher(ctx context.Context, p Publisher) error {
	d.mu.Lock()
	d.publisher = p
	d.mu.Unlock()
	return d.Publish(ctx)
}

// Publish writes the node's slice asynchronously: the publisher's
// controller retries until it is written.
func (d *Driver) Publish(ctx context.Context) error {
	d.mu.Lock()
	p := d.publisher
	d.mu.Unlock()
	if p == nil {
		return nil
	}
	if err := p.PublishResources(ctx, d.Resources()); err != nil {
		return fmt.Errorf("publishing the ResourceSlice of node %s: %w", d.node, err)
	}
	return nil
}

// SetUnhealthy replaces the set of unhealthy cards (UUID -> true),
// republishes the slice and wakes WatchHealthStatus.
func (d *Driver) SetUnhealthy(ctx context.Context, unhealthy map[string]bool) {
	d.mu.Lock()
	d.info.Unhealthy = unhealthy
	close(d.healthChanged)
	d.healthChanged = make(chan struct{})
	d.mu.Unlock()
	if err := d.Publish(ctx); err != nil {
		klog.FromContext(ctx).Error(err, "Publishing the cards' health")
	}
}

// HeldChanged reads again what the device plugin's pods hold, logs it
// when it changed, and republishes the slice: each card publishes its
// memory less what they hold (devices.Published).
func (d *Driver) HeldChanged(ctx context.Context) {
	if d.held == nil {
		return
	}
	held := d.held.Held()
	d.mu.Lock()
	changed := !maps.Equal(held, d.info.Held)
	d.info.Held = held
	d.mu.Unlock()
	if !changed {
		return
	}
	logger := klog.FromContext(ctx)
	if len(held) == 0 {
		logger.Info("No pod of the device plugin holds GPU memory on the node any more: every card publishes its whole memory")
	} else {
		byDevice := map[string]string{}
		for _, c := range d.cards {
			if mib, ok := held[c.UUID]; ok {
				byDevice[c.DeviceName()] = fmt.Sprintf("%d of %d MiB held, %d published", mib, c.CapacityMiB, devices.Published(c, mib, d.info.Unit))
			}
		}
		logger.Info("Pods of the device plugin still hold GPU memory on the node: its cards publish what is left until they finish", "cards", byDevice, "pods", d.held.HeldPods())
	}
	if err := d.Publish(ctx); err != nil {
		logger.Error(err, "Publishing what the device plugin's pods leave of the cards")
	}
}

// PrepareResourceClaims prepares each claim (State.Prepare); a claim that
// fails carries its error, and kubelet retries it.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	logger := klog.FromContext(ctx)
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		devs, err := d.state.Prepare(ctx, c)
		if err != nil {
			logger.Error(err, "Preparing a claim failed", "claim", klog.KObj(c))
			out[c.UID] = kubeletplugin.PrepareResult{Err: err}
			continue
		}
		logger.V(2).Info("Prepared a claim", "claim", klog.KObj(c), "devices", len(devs))
		out[c.UID] = kubeletplugin.PrepareResult{Devices: kubeletDevices(devs)}
	}
	return out, nil
}

// kubeletDevices is what kubelet gets for a prepared claim's devices.
func kubeletDevices(devs []checkpoint.Device) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(devs))
	for _, d := range devs {
		kd := kubeletplugin.Device{Requests: []string{d.Request}, PoolName: d.Pool, DeviceName: d.Device, CDIDeviceIDs: d.CDIDeviceIDs}
		if d.ShareID != "" {
			id := types.UID(d.ShareID)
			kd.ShareID = &id
		}
		out = append(out, kd)
	}
	return out
}

// UnprepareResourceClaims unprepares each claim (State.Unprepare).
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	logger := klog.FromContext(ctx)
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := d.state.Unprepare(ctx, c.UID)
		if err != nil {
			logger.Error(err, "Unpreparing a claim failed", "claim", c.NamespacedName, "uid", c.UID)
		} else {
			logger.V(2).Info("Unprepared a claim", "claim", c.NamespacedName, "uid", c.UID)
		}
		out[c.UID] = err
	}
	return out, nil
}

// HandleError logs a background error, from publishing the slice or
// serving gRPC. One that is not recoverable ends the driver.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.fail != nil {
		d.fail(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus reports every card's health to kubelet: once at the
// start, on every change, and every healthResend, until ctx ends.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	t := time.NewTicker(healthResend)
	defer t.Stop()
	for {
		d.mu.Lock()
		changed := d.healthChanged
		r := kubeletplugin.DeviceHealthReport{}
		now := time.Now()
		for _, c := range d.cards {
			h := kubeletplugin.DeviceHealth{PoolName: d.node, DeviceName: c.DeviceName(), Health: kubeletplugin.HealthStatusHealthy, LastUpdated: now}
			if d.info.Unhealthy[c.UUID] {
				h.Health, h.Message = kubeletplugin.HealthStatusUnhealthy, "critical XID"
			}
			r.Devices = append(r.Devices, h)
		}
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case reports <- r:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-t.C:
		}
	}
}
