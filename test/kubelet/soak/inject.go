package soak

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// startAttempts is how often the injector tries to bring a crashed
// component back before it records a violation.
const startAttempts = 3

// Injector applies a Planner's faults to Targets, up to overlap at a time.
// With overlap 1 they come one after the other: inject, hold, heal, gap.
// With more, the next fault begins a gap after the last one began, as soon
// as fewer than overlap are in flight: a fault may then begin while others
// hold (the API server paused while a kube-scheduler leader is down). A
// target is hit by one fault at a time: a fault on a target still held
// waits for it.
type Injector struct {
	targets Targets
	planner *Planner
	log     *printer
	vs      *Violations
	overlap int
	// busy: target key (kind and index) -> held while a fault acts on it.
	busy map[string]*sync.Mutex

	mu sync.Mutex
	// counts: kind -> faults injected.
	counts map[Kind]int
	// healed is when the last fault was healed.
	healed time.Time
	// inFlight: fault number -> its kind, for the faults not yet healed.
	inFlight map[int]Kind
	// overlapped counts the faults that began while another was in flight.
	overlapped int
	// leaders counts the faults that killed a leading replica, by kind.
	leaders map[Kind]int
}

// NewInjector returns an injector of planner's faults on targets, at most
// overlap in flight together (below 1: 1).
func NewInjector(targets Targets, planner *Planner, overlap int, log *printer, vs *Violations) *Injector {
	return &Injector{
		targets: targets, planner: planner, log: log, vs: vs, overlap: max(overlap, 1),
		busy: map[string]*sync.Mutex{}, counts: map[Kind]int{}, inFlight: map[int]Kind{}, leaders: map[Kind]int{},
	}
}

// Run injects faults until more reports false (asked before each fault,
// with the number begun so far) or ctx ends, and returns once every fault
// begun has been healed.
func (in *Injector) Run(ctx context.Context, more func(faults int) bool) {
	slots := make(chan struct{}, in.overlap)
	var wg sync.WaitGroup
	defer wg.Wait()
	for n := 1; ctx.Err() == nil && more(n-1); n++ {
		s := in.planner.Next()
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		done := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done)
			defer func() { <-slots }()
			in.fault(ctx, n, s)
		}()
		if in.overlap == 1 {
			<-done
		}
		sleep(ctx, s.Gap)
	}
}

// fault applies fault n, step s, once its target is free, and records it.
func (in *Injector) fault(ctx context.Context, n int, s Step) {
	target := in.lock(s)
	defer target.Unlock()
	in.mu.Lock()
	others := slices.Sorted(maps.Keys(in.inFlight))
	kinds := make([]string, len(others))
	for i, m := range others {
		kinds[i] = fmt.Sprintf("%d (%s)", m, in.inFlight[m])
	}
	in.inFlight[n] = s.Kind
	if len(others) > 0 {
		in.overlapped++
	}
	in.mu.Unlock()

	begin := time.Now()
	what, role, err := in.inject(ctx, s)
	in.vs.Checked(InvRecover)
	in.mu.Lock()
	delete(in.inFlight, n)
	in.counts[s.Kind]++
	in.healed = time.Now()
	if role != "" {
		in.leaders[s.Kind] += 0 // known: listed even when no leader was hit
	}
	if role == "leader" {
		in.leaders[s.Kind]++
	}
	in.mu.Unlock()
	if err != nil {
		in.vs.Add(InvRecover, fmt.Sprintf("fault %d (%s %s): %v", n, s.Kind, what, err))
	}
	also := ""
	if len(kinds) > 0 {
		also = ", begun while faults " + strings.Join(kinds, ", ") + " were in flight"
	}
	in.log.printf("fault %d: %s %s, healed after %.1fs%s", n, s.Kind, what, time.Since(begin).Seconds(), also)
}

// lock takes the target of s, waiting while another fault holds it.
func (in *Injector) lock(s Step) *sync.Mutex {
	key := fmt.Sprintf("%s/%d", s.Kind, s.Target)
	in.mu.Lock()
	m, ok := in.busy[key]
	if !ok {
		m = &sync.Mutex{}
		in.busy[key] = m
	}
	in.mu.Unlock()
	m.Lock()
	return m
}

// Counts returns the faults injected by kind, and their total.
func (in *Injector) Counts() (map[Kind]int, int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	out, total := map[Kind]int{}, 0
	for k, v := range in.counts {
		out[k] = v
		total += v
	}
	return out, total
}

// Overlapped returns how many faults began while another was in flight.
func (in *Injector) Overlapped() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.overlapped
}

// LeaderKills returns how many faults of each kind killed the replica that
// led then, for the kinds that hit replicas of known role.
func (in *Injector) LeaderKills() map[Kind]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[Kind]int{}
	for k, v := range in.leaders {
		out[k] = v
	}
	return out
}

// Healed is when the last fault was healed; zero before any.
func (in *Injector) Healed() time.Time {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.healed
}

// inject applies one fault and heals it; it returns what it hit and, for a
// Replica, its role when it was killed.
func (in *Injector) inject(ctx context.Context, s Step) (string, string, error) {
	switch s.Kind {
	case KindExtenderKill, KindSchedulerKill, KindPluginKill:
		c := in.component(s)
		name, role := c.Name(), ""
		if r, ok := c.(Replica); ok {
			role = r.Role(ctx)
		}
		if role != "" {
			name += " (" + role + ")"
		}
		if err := c.Kill(); err != nil {
			return name, role, fmt.Errorf("killing %s: %w", c.Name(), err)
		}
		sleep(ctx, s.Hold)
		return fmt.Sprintf("%s (down %.1fs)", name, s.Hold.Seconds()), role, in.start(ctx, c)
	}
	what, err := in.act(ctx, s)
	return what, "", err
}

// act applies a fault that kills nothing and heals it; it returns what it
// hit.
func (in *Injector) act(ctx context.Context, s Step) (string, error) {
	switch s.Kind {
	case KindKubeletRestart:
		k := in.targets.Kubelets[s.Target]
		err := k.Restart()
		sleep(ctx, s.Hold)
		return k.Name(), err
	case KindAPIServerPause:
		a := in.targets.APIServers[s.Target]
		if err := a.Pause(); err != nil {
			return a.Name(), fmt.Errorf("pausing %s: %w", a.Name(), err)
		}
		sleep(ctx, s.Hold)
		// Resumed whatever ctx says: a paused API server stops everything.
		return fmt.Sprintf("%s (paused %.1fs)", a.Name(), s.Hold.Seconds()), a.Resume()
	case KindCardUnhealthy:
		c := in.targets.Cards[s.Target]
		what := fmt.Sprintf("%s card %d (unhealthy %.1fs)", c.Name(), s.Card, s.Hold.Seconds())
		if err := c.SetHealthy(ctx, s.Card, false); err != nil {
			return what, err
		}
		sleep(ctx, s.Hold)
		return what, c.SetHealthy(context.WithoutCancel(ctx), s.Card, true)
	}
	return "", fmt.Errorf("unknown fault kind %q", s.Kind)
}

func (in *Injector) component(s Step) Component {
	switch s.Kind {
	case KindExtenderKill:
		return in.targets.Extenders[s.Target]
	case KindSchedulerKill:
		return in.targets.Schedulers[s.Target]
	default:
		return in.targets.Plugins[s.Target]
	}
}

// start brings a killed component back, trying startAttempts times.
func (in *Injector) start(ctx context.Context, c Component) error {
	var err error
	for i := range startAttempts {
		if err = c.Start(context.WithoutCancel(ctx)); err == nil {
			return nil
		}
		in.log.printf("starting %s again (attempt %d of %d) failed: %v", c.Name(), i+1, startAttempts, err)
		_ = c.Kill()
	}
	return fmt.Errorf("%s did not come back after %d attempts: %w", c.Name(), startAttempts, err)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
