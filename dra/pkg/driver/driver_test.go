package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/dra/pkg/prepare"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// fakePublisher records what the driver publishes.
type fakePublisher struct {
	mu        sync.Mutex
	published []resourceslice.DriverResources
}

func (p *fakePublisher) PublishResources(_ context.Context, r resourceslice.DriverResources) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.published = append(p.published, r)
	return nil
}

func (p *fakePublisher) last() resourceslice.DriverResources {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.published[len(p.published)-1]
}

var testCards = []devices.Card{
	{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "T4", MemoryMiB: 16384}, CapacityMiB: 16384, Isolation: gpushare.IsolationNone},
	{Card: gpushare.Card{Index: 1, UUID: "GPU-1", Model: "T4", MemoryMiB: 16384}, CapacityMiB: 16384, Isolation: gpushare.IsolationNone},
}

func newTestDriver(t *testing.T, fail func(error)) *Driver {
	t.Helper()
	specs, err := prepare.NewClaimSpecs(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	state, err := prepare.New(prepare.Config{Pool: "node-a", Unit: gpushare.UnitGiB, Cards: testCards, CheckpointDir: t.TempDir(), Specs: specs})
	if err != nil {
		t.Fatal(err)
	}
	return New("node-a", testCards, devices.OrderIndex, devices.Info{Unit: gpushare.UnitGiB}, state, nil, fail)
}

func allocated(name, device string, gib int64) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: devices.DriverName, Pool: "node-a", Device: device, ShareID: ptr.To(types.UID("share-" + name)),
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{devices.CapacityMemory: *resource.NewQuantity(gib<<30, resource.BinarySI)},
			}},
		}}},
	}
}

func TestPrepareAndUnprepareResourceClaims(t *testing.T) {
	ctx := context.Background()
	d := newTestDriver(t, nil)
	got, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocated("a", "gpu-0", 12), allocated("b", "gpu-0", 8)})
	if err != nil {
		t.Fatal(err)
	}
	if r := got["uid-a"]; r.Err != nil || len(r.Devices) != 1 {
		t.Fatalf("claim a: %+v, want one device", r)
	}
	want := kubeletplugin.Device{Requests: []string{"gpu"}, PoolName: "node-a", DeviceName: "gpu-0",
		CDIDeviceIDs: []string{"gpushare.io/gpu-claim=uid-a-gpu"}, ShareID: ptr.To(types.UID("share-a"))}
	if diff := cmp.Diff(want, got["uid-a"].Devices[0]); diff != "" {
		t.Errorf("claim a's device (-want +got):\n%s", diff)
	}
	if r := got["uid-b"]; r.Err == nil {
		t.Errorf("claim b (8 GiB onto the 4 GiB left of gpu-0) was prepared: %+v", r)
	}
	un, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{NamespacedName: types.NamespacedName{Namespace: "default", Name: "a"}, UID: "uid-a"}})
	if err != nil || un["uid-a"] != nil {
		t.Fatalf("Unprepare: %v, %v", un, err)
	}
	again, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{allocated("b", "gpu-0", 8)})
	if err != nil || again["uid-b"].Err != nil {
		t.Errorf("claim b after a was unprepared: %+v, %v", again, err)
	}
}

func TestHealthTaintsAndReports(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := newTestDriver(t, nil)
	pub := &fakePublisher{}
	if err := d.SetPublisher(ctx, pub); err != nil {
		t.Fatal(err)
	}
	taints := func() map[string]int {
		out := map[string]int{}
		for _, dev := range pub.last().Pools["node-a"].Slices[0].Devices {
			out[dev.Name] = len(dev.Taints)
		}
		return out
	}
	if diff := cmp.Diff(map[string]int{"gpu-0": 0, "gpu-1": 0}, taints()); diff != "" {
		t.Errorf("taints at the start (-want +got):\n%s", diff)
	}

	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()
	health := func(r kubeletplugin.DeviceHealthReport) map[string]kubeletplugin.HealthStatus {
		out := map[string]kubeletplugin.HealthStatus{}
		for _, h := range r.Devices {
			out[h.DeviceName] = h.Health
		}
		return out
	}
	if diff := cmp.Diff(map[string]kubeletplugin.HealthStatus{"gpu-0": "Healthy", "gpu-1": "Healthy"}, health(<-reports)); diff != "" {
		t.Errorf("first report (-want +got):\n%s", diff)
	}
	d.SetUnhealthy(ctx, map[string]bool{"GPU-1": true})
	select {
	case r := <-reports:
		if diff := cmp.Diff(map[string]kubeletplugin.HealthStatus{"gpu-0": "Healthy", "gpu-1": "Unhealthy"}, health(r)); diff != "" {
			t.Errorf("report after an XID (-want +got):\n%s", diff)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report within 10 s of a health change")
	}
	if diff := cmp.Diff(map[string]int{"gpu-0": 0, "gpu-1": 1}, taints()); diff != "" {
		t.Errorf("taints after an XID on GPU-1 (-want +got):\n%s", diff)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchHealthStatus returned %v after its context ended", err)
	}
}

func TestHandleError(t *testing.T) {
	var failed []error
	d := newTestDriver(t, func(err error) { failed = append(failed, err) })
	ctx := context.Background()
	d.HandleError(ctx, fmt.Errorf("flaky: %w", kubeletplugin.ErrRecoverable), "publishing")
	if len(failed) != 0 {
		t.Errorf("a recoverable error ended the driver: %v", failed)
	}
	d.HandleError(ctx, errors.New("fields dropped"), "publishing")
	if len(failed) != 1 {
		t.Errorf("a fatal error did not end the driver: %v", failed)
	}
}
