package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// ErrNotLeader is Fence's error on a replica that does not serve: it is
// not the leader, or still catching up.
var ErrNotLeader = errors.New("this extender replica is not the leader")

// ErrLeaseExpiring is Fence's error when the Lease was last renewed too
// long ago for a Binding to end before the renew deadline.
var ErrLeaseExpiring = errors.New("this extender replica's lease is about to expire")

// minBindTime is the least time a Binding write is given. With less left
// before the fence, the write is refused rather than cut short.
const minBindTime = 500 * time.Millisecond

// catchUpRetry is how long a failed catch-up waits before it is tried again.
const catchUpRetry = time.Second

// CatchUpFunc reads the API's current bound pods into the cache
// (feed.Feeder.CatchUp) and returns how many it read.
type CatchUpFunc func(ctx context.Context) (pods int, err error)

// Gate says whether this replica may place pods, and fences its Binding
// writes to its term. The zero value is not usable; use NewGate.
type Gate struct {
	catchUp CatchUpFunc
	// renewDeadline: a Binding write must end by the last renewal plus this.
	renewDeadline time.Duration
	// readyWhenServing: /readyz follows Serving, for standalone replicas
	// behind a Service. Otherwise Ready is always true (the sidecar).
	readyWhenServing bool
	clock            clock.PassiveClock

	mu sync.Mutex
	// leading: the lease is ours, from its acquisition until the term ends.
	leading bool
	// caughtUp: the current term's catch-up has finished.
	caughtUp bool
	// renewed: when we last renewed the lease, by our clock before the
	// renewal was sent; or the followed Lease's renewTime.
	renewed time.Time
	// term is cancelled when the term ends; endTerm cancels it.
	term    context.Context
	endTerm context.CancelFunc
	// terms counts the terms begun, for tests and logs.
	terms int
	// inFlight counts the fenced Binding writes running.
	inFlight int
}

// NewGate returns a gate that runs catchUp at the start of each term and
// fences Binding writes to renewDeadline after each renewal. With
// readyWhenServing, Ready reports Serving.
func NewGate(catchUp CatchUpFunc, renewDeadline time.Duration, readyWhenServing bool, clk clock.PassiveClock) *Gate {
	if clk == nil {
		clk = clock.RealClock{}
	}
	term, cancel := context.WithCancel(context.Background())
	cancel()
	return &Gate{catchUp: catchUp, renewDeadline: renewDeadline, readyWhenServing: readyWhenServing, clock: clk, term: term, endTerm: cancel}
}

// Serving reports whether this replica leads, has caught up, and its lease
// was renewed within the renew deadline.
func (g *Gate) Serving() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.leading && g.caughtUp && g.clock.Now().Before(g.renewed.Add(g.renewDeadline))
}

// Ready is what /readyz reports beside the informers' sync: Serving for
// standalone replicas, true for a sidecar. A sidecar's pod must stay ready
// whoever leads.
func (g *Gate) Ready() bool { return !g.readyWhenServing || g.Serving() }

// Terms returns how many terms have begun.
func (g *Gate) Terms() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.terms
}

// Fence returns a context for one Binding write, or refuses it with
// ErrNotLeader or ErrLeaseExpiring. The context ends at the last renewal
// plus the renew deadline, or when the term ends, whichever comes first.
// done must be called when the write has returned.
func (g *Gate) Fence(ctx context.Context) (fenced context.Context, done func(), err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.leading || !g.caughtUp {
		return nil, nil, ErrNotLeader
	}
	until := g.renewed.Add(g.renewDeadline)
	if left := until.Sub(g.clock.Now()); left < minBindTime {
		return nil, nil, fmt.Errorf("lease last renewed at %s, %s left of the renew deadline (%s): %w", g.renewed.Format(time.RFC3339Nano), left, g.renewDeadline, ErrLeaseExpiring)
	}
	fenced, cancel := context.WithDeadline(ctx, until)
	stop := context.AfterFunc(g.term, cancel)
	g.inFlight++
	return fenced, func() {
		stop()
		cancel()
		g.mu.Lock()
		g.inFlight--
		g.mu.Unlock()
	}, nil
}

// renewal records a successful renewal of our lease at t.
func (g *Gate) renewal(t time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if t.After(g.renewed) {
		g.renewed = t
	}
}

// begin starts a term: the replica serves once the catch-up has run. It
// returns at once. The catch-up retries until it succeeds or the term
// ends.
func (g *Gate) begin(ctx context.Context) {
	logger := klog.FromContext(ctx)
	g.mu.Lock()
	g.endTerm()
	term, cancel := context.WithCancel(ctx)
	g.term, g.endTerm = term, cancel
	g.leading, g.caughtUp = true, false
	g.terms++
	g.mu.Unlock()
	logger.Info("Became leader; catching up with the API before serving")
	go func() {
		start := g.clock.Now()
		for {
			pods, err := g.catchUp(term)
			if err == nil {
				g.mu.Lock()
				if g.term == term && term.Err() == nil {
					g.caughtUp = true
				}
				g.mu.Unlock()
				logger.Info("Caught up; serving as leader", "boundPods", pods, "took", g.clock.Since(start))
				return
			}
			logger.Error(err, "Catching up with the API failed; retrying", "retryIn", catchUpRetry)
			select {
			case <-term.Done():
				return
			case <-time.After(catchUpRetry):
			}
		}
	}()
}

// end ends the current term: the replica stops serving and its in-flight
// Binding writes are cancelled.
func (g *Gate) end(logger klog.Logger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leading {
		logger.Info("Stopped leading; in-flight binds cancelled")
	}
	g.leading, g.caughtUp = false, false
	g.endTerm()
}

// drain waits until the fenced writes have returned, then grace more, or
// until ctx ends. grace is the margin for a write the API server may still
// apply.
func (g *Gate) drain(ctx context.Context, grace time.Duration) {
	for {
		g.mu.Lock()
		n := g.inFlight
		g.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-time.After(10 * time.Millisecond):
		case <-ctx.Done():
			return
		}
	}
	select {
	case <-time.After(grace):
	case <-ctx.Done():
	}
}
