package gpu

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

func TestNVMLDevices(t *testing.T) {
	srv := dgxa100.New()
	// Discovery asks only what the plugin uses: a card whose minor number
	// NVML cannot read is still found.
	srv.Devices[1].(*dgxa100.Device).GetMinorNumberFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	n, err := OpenNVML(srv)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = n.Close() }()
	got, err := n.Devices()
	if err != nil {
		t.Fatal(err)
	}
	var want []Device
	for i, d := range srv.Devices {
		want = append(want, Device{Card: gpushare.Card{Index: i, UUID: d.(*dgxa100.Device).UUID, Model: "Mock NVIDIA A100-SXM4-40GB", MemoryMiB: 40960}})
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Devices() mismatch (-want +got):\n%s", diff)
	}
}

func TestNVMLErrors(t *testing.T) {
	srv := dgxa100.New()
	srv.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	if _, err := OpenNVML(srv); err == nil {
		t.Fatal("OpenNVML with a failing Init: want an error")
	}

	srv = dgxa100.New()
	srv.Devices[3].(*dgxa100.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	n, err := OpenNVML(srv)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Devices(); err == nil {
		t.Error("Devices with a lost GPU: want an error")
	}
	tests := []struct {
		name    string
		uuid    string
		wantErr bool
	}{
		{name: "healthy card", uuid: srv.Devices[0].(*dgxa100.Device).UUID},
		{name: "lost card", uuid: srv.Devices[3].(*dgxa100.Device).UUID, wantErr: true},
		{name: "unknown card", uuid: "GPU-00000000-0000-0000-0000-000000000000", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := n.Probe(tc.uuid); (err != nil) != tc.wantErr {
				t.Errorf("Probe(%s) = %v, want error %v", tc.uuid, err, tc.wantErr)
			}
		})
	}
}

// eventFeed is an NVML event set fed by the test.
type eventFeed struct {
	mu         sync.Mutex
	registered []int // indexes of the cards registered for XID events
	waits      chan waitResult
}

type waitResult struct {
	data nvml.EventData
	ret  nvml.Return
}

func TestNVMLWatchXIDs(t *testing.T) {
	srv := dgxa100.New()
	feed := &eventFeed{waits: make(chan waitResult)}
	srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				select {
				case w := <-feed.waits:
					return w.data, w.ret
				case <-time.After(time.Duration(ms) * time.Millisecond):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
		}, nvml.SUCCESS
	}
	for i, d := range srv.Devices {
		dev := d.(*dgxa100.Device)
		dev.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
			if i == 7 { // a card without XID events is not watched
				return nvml.EventTypePState, nvml.SUCCESS
			}
			return nvml.EventTypeXidCriticalError | nvml.EventTypePState, nvml.SUCCESS
		}
		dev.RegisterEventsFunc = func(mask uint64, _ nvml.EventSet) nvml.Return {
			feed.mu.Lock()
			defer feed.mu.Unlock()
			if mask == nvml.EventTypeXidCriticalError {
				feed.registered = append(feed.registered, i)
			}
			return nvml.SUCCESS
		}
	}
	n, err := OpenNVML(srv)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan Event)
	done := make(chan error)
	go func() { done <- n.WatchXIDs(ctx, out) }()

	uuid2 := srv.Devices[2].(*dgxa100.Device).UUID
	feeds := []waitResult{
		{ret: nvml.ERROR_TIMEOUT},
		{data: nvml.EventData{Device: srv.Devices[2], EventType: nvml.EventTypePState}, ret: nvml.SUCCESS},
		{data: nvml.EventData{Device: srv.Devices[2], EventType: nvml.EventTypeXidCriticalError, EventData: 79}, ret: nvml.SUCCESS},
		{data: nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 48}, ret: nvml.SUCCESS},
		{ret: nvml.ERROR_UNKNOWN},
	}
	go func() {
		for _, f := range feeds {
			feed.waits <- f
		}
	}()
	var got []Event
	for len(got) < 3 {
		got = append(got, <-out)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	want := []Event{{UUID: uuid2, XID: 79}, {XID: 48}, {}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events mismatch (-want +got):\n%s", diff)
	}
	feed.mu.Lock()
	defer feed.mu.Unlock()
	if diff := cmp.Diff([]int{0, 1, 2, 3, 4, 5, 6}, feed.registered); diff != "" {
		t.Errorf("registered cards mismatch (-want +got):\n%s", diff)
	}
}
