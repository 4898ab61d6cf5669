package gpu

import (
	"context"
	"fmt"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// eventWaitMillis bounds one wait for an XID event, so that a watch notices
// its context ending within this many milliseconds.
const eventWaitMillis = 1000

// NVML reads the cards through NVIDIA's management library.
type NVML struct {
	lib nvml.Interface
}

// OpenNVML initialises lib. A nil lib is nvml.New(), which loads
// libnvidia-ml.so.1. Close releases it.
func OpenNVML(lib nvml.Interface) (*NVML, error) {
	if lib == nil {
		lib = nvml.New()
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialising NVML (is the NVIDIA driver installed and libnvidia-ml.so.1 mounted?): %w", ret)
	}
	return &NVML{lib: lib}, nil
}

// Close shuts NVML down.
func (n *NVML) Close() error {
	if ret := n.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("shutting NVML down: %w", ret)
	}
	return nil
}

// Devices lists the cards in index order.
func (n *NVML) Devices() ([]Device, error) {
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("counting GPUs: %w", ret)
	}
	out := make([]Device, 0, count)
	for i := 0; i < count; i++ {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("opening GPU %d: %w", i, ret)
		}
		dev, err := describe(i, d)
		if err != nil {
			return nil, err
		}
		out = append(out, dev)
	}
	return out, nil
}

func describe(index int, d nvml.Device) (Device, error) {
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("reading the UUID of GPU %d: %w", index, ret)
	}
	name, ret := d.GetName()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("reading the name of GPU %d: %w", index, ret)
	}
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("reading the memory of GPU %d: %w", index, ret)
	}
	return Device{Card: gpushare.Card{Index: index, UUID: uuid, Model: name, MemoryMiB: int64(mem.Total >> 20)}}, nil
}

// Probe reports whether the card still answers: it looks the card up by
// UUID and reads its memory.
func (n *NVML) Probe(uuid string) error {
	d, ret := n.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("looking up GPU %s: %w", uuid, ret)
	}
	if _, ret := d.GetMemoryInfo(); ret != nvml.SUCCESS {
		return fmt.Errorf("reading the memory of GPU %s: %w", uuid, ret)
	}
	return nil
}

// WatchXIDs sends the XID events of every card that supports them to out
// until ctx ends. A card without XID event support is logged and not
// watched. A failed wait is sent as Event{} (it counts against every card)
// and the watch goes on.
func (n *NVML) WatchXIDs(ctx context.Context, out chan<- Event) error {
	logger := klog.FromContext(ctx)
	set, ret := n.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("creating an NVML event set: %w", ret)
	}
	defer func() { _ = set.Free() }()
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("counting GPUs: %w", ret)
	}
	watched := 0
	for i := 0; i < count; i++ {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("opening GPU %d: %w", i, ret)
		}
		supported, ret := d.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || supported&nvml.EventTypeXidCriticalError == 0 {
			logger.Info("GPU does not report XID events; its health is not watched", "index", i, "nvml", ret.Error())
			continue
		}
		if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			return fmt.Errorf("registering for the XID events of GPU %d: %w", i, ret)
		}
		watched++
	}
	logger.V(2).Info("Watching XID events", "gpus", watched)
	for ctx.Err() == nil {
		e, ret := set.Wait(eventWaitMillis)
		if ret == nvml.ERROR_TIMEOUT {
			continue
		}
		var ev Event
		switch {
		case ret != nvml.SUCCESS:
			logger.Error(ret, "Waiting for XID events failed; counting it against every GPU")
			select { // do not spin on a lost GPU
			case <-time.After(eventWaitMillis * time.Millisecond):
			case <-ctx.Done():
			}
		case e.EventType != nvml.EventTypeXidCriticalError:
			continue
		default:
			ev.XID = e.EventData
			if e.Device != nil {
				if uuid, ret := e.Device.GetUUID(); ret == nvml.SUCCESS {
					ev.UUID = uuid
				}
			}
		}
		select {
		case out <- ev:
		case <-ctx.Done():
		}
	}
	return nil
}
