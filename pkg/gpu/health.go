package gpu

import (
	"context"
	"sort"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// DefaultRecoveryWindow is how long a card must go without a critical XID
// before it may be healthy again.
const DefaultRecoveryWindow = 5 * time.Minute

// Health is the health policy of a node's cards. Per card (by UUID):
//
//	            critical XID on it, or an event for no card
//	healthy ───────────────────────────────────────────► unhealthy(last = now)
//	   ▲                                                   │  ▲
//	   │   Recover: now ≥ last + window and Probe(card)    │  │ another critical
//	   └─────────────── succeeds ──────────────────────────┘  └─ XID: last = now
//
// Application XIDs (IsCritical false) change nothing. A card the driver no
// longer answers for (XID 79, fallen off the bus) fails its probe and stays
// unhealthy. Health is safe for concurrent use.
type Health struct {
	clock  clock.PassiveClock
	window time.Duration

	mu sync.Mutex
	// cards: UUID -> its state; every known card has an entry.
	cards map[string]*cardHealth
}

type cardHealth struct {
	healthy bool
	// lastAt is when the last critical XID (or failed wait) came;
	// meaningful while unhealthy.
	lastAt time.Time
}

// NewHealth returns every card in uuids healthy. window ≤ 0 means
// DefaultRecoveryWindow; clk nil means the real clock.
func NewHealth(uuids []string, window time.Duration, clk clock.PassiveClock) *Health {
	if window <= 0 {
		window = DefaultRecoveryWindow
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	h := &Health{clock: clk, window: window, cards: map[string]*cardHealth{}}
	for _, u := range uuids {
		h.cards[u] = &cardHealth{healthy: true}
	}
	return h
}

// Observe applies an XID event and returns the UUIDs (sorted) whose health
// changed. An event for an unknown UUID changes nothing.
func (h *Health) Observe(e Event) []string {
	if e.XID != 0 && !IsCritical(e.XID) {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock.Now()
	var changed []string
	mark := func(uuid string, c *cardHealth) {
		if c.healthy {
			changed = append(changed, uuid)
		}
		c.healthy, c.lastAt = false, now
	}
	if e.UUID == "" {
		for u, c := range h.cards {
			mark(u, c)
		}
	} else if c, ok := h.cards[e.UUID]; ok {
		mark(e.UUID, c)
	}
	sort.Strings(changed)
	return changed
}

// Recover brings back every unhealthy card whose last critical XID is at
// least the window old and whose probe succeeds; it returns their UUIDs
// (sorted). The probe runs without the lock held.
func (h *Health) Recover(probe func(uuid string) error) []string {
	h.mu.Lock()
	now := h.clock.Now()
	var due []string
	for u, c := range h.cards {
		if !c.healthy && !now.Before(c.lastAt.Add(h.window)) {
			due = append(due, u)
		}
	}
	h.mu.Unlock()
	sort.Strings(due)
	var back []string
	for _, u := range due {
		if probe(u) != nil {
			continue
		}
		h.mu.Lock()
		// Another XID may have come while probing.
		if c := h.cards[u]; !c.healthy && !now.Before(c.lastAt.Add(h.window)) {
			c.healthy = true
			back = append(back, u)
		}
		h.mu.Unlock()
	}
	return back
}

// Healthy reports whether a known card is healthy; unknown cards are not.
func (h *Health) Healthy(uuid string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.cards[uuid]
	return ok && c.healthy
}

// HealthSource is where Watch reads XID events and probes cards
// (gpu.NVML, gpu.Fake).
type HealthSource interface {
	WatchXIDs(ctx context.Context, out chan<- Event) error
	Probe(uuid string) error
}

// DefaultProbePeriod is how often Watch considers unhealthy cards for
// recovery, at most (half the recovery window when that is shorter).
const DefaultProbePeriod = 30 * time.Second

// Watch applies src's XID events and recovery probes to h, calling apply
// after every change, until ctx ends. It probes every DefaultProbePeriod,
// or every half recovery window when that is shorter.
func (h *Health) Watch(ctx context.Context, src HealthSource, apply func()) {
	logger := klog.FromContext(ctx)
	events := make(chan Event)
	go func() {
		if err := src.WatchXIDs(ctx, events); err != nil {
			logger.Error(err, "Watching XID events failed; card health is no longer watched")
		}
	}()
	t := time.NewTicker(max(min(DefaultProbePeriod, h.window/2), 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-events:
			changed := h.Observe(e)
			if len(changed) == 0 {
				// An application XID, or a card already unhealthy.
				logger.V(4).Info("XID event changes no card's health", "uuid", e.UUID, "xid", e.XID)
				continue
			}
			logger.Info("GPUs marked unhealthy", "uuids", changed, "xid", e.XID, "recoveryWindow", h.window)
			apply()
		case <-t.C:
			if back := h.Recover(src.Probe); len(back) > 0 {
				logger.Info("GPUs healthy again", "uuids", back)
				apply()
			}
		}
	}
}

// Unhealthy returns the UUIDs of the unhealthy cards: UUID -> true.
func (h *Health) Unhealthy() map[string]bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]bool{}
	for u, c := range h.cards {
		if !c.healthy {
			out[u] = true
		}
	}
	return out
}
