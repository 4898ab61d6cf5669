package gpu

import "github.com/gpushare/gpushare/pkg/gpushare"

// Device is one physical card.
type Device struct {
	gpushare.Card
	// MIG is true for a fake card whose spec says ":mig"; NVML reports a
	// real card's MIG mode through Features, not here.
	MIG bool
}

// Event is an XID error reported by the driver.
type Event struct {
	// UUID of the card; empty when the driver could not say which card, or
	// when waiting for events failed: both count against every card.
	UUID string
	// XID is the error code (see NVIDIA's XID catalog); 0 with an empty
	// UUID means the event wait itself failed.
	XID uint64
}

// applicationXIDs are the XIDs that an application, not the card, causes;
// NVIDIA's own device plugin ignores the same set. 13: graphics engine
// exception, 31: GPU memory page fault, 43: GPU stopped processing, 45:
// preemptive cleanup, 68: video processor exception, 109: context switch
// timeout.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// IsCritical reports whether an XID makes its card unhealthy.
func IsCritical(xid uint64) bool { return !applicationXIDs[xid] }
