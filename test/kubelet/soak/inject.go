package soak

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// startAttempts is how often the injector tries to bring a crashed
// component back before it records a violation.
const startAttempts = 3

// Injector applies a Planner's faults to Targets, one at a time: inject,
// hold, heal, gap.
type Injector struct {
	targets Targets
	planner *Planner
	log     *printer
	vs      *Violations

	mu sync.Mutex
	// counts: kind -> faults injected.
	counts map[Kind]int
	// healed is when the last fault was healed.
	healed time.Time
}

// NewInjector returns an injector of planner's faults on targets.
func NewInjector(targets Targets, planner *Planner, log *printer, vs *Violations) *Injector {
	return &Injector{targets: targets, planner: planner, log: log, vs: vs, counts: map[Kind]int{}}
}

// Run injects faults until more reports false (asked before each fault,
// with the number injected so far) or ctx ends.
func (in *Injector) Run(ctx context.Context, more func(faults int) bool) {
	for n := 0; ctx.Err() == nil && more(n); n++ {
		s := in.planner.Next()
		begin := time.Now()
		what, err := in.inject(ctx, s)
		in.vs.Checked(InvRecover)
		in.mu.Lock()
		in.counts[s.Kind]++
		in.healed = time.Now()
		in.mu.Unlock()
		if err != nil {
			in.vs.Add(InvRecover, fmt.Sprintf("fault %d (%s %s): %v", n+1, s.Kind, what, err))
		}
		in.log.printf("fault %d: %s %s, healed after %.1fs", n+1, s.Kind, what, time.Since(begin).Seconds())
		sleep(ctx, s.Gap)
	}
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

// Healed is when the last fault was healed; zero before any.
func (in *Injector) Healed() time.Time {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.healed
}

// inject applies one fault and heals it; it returns what it hit.
func (in *Injector) inject(ctx context.Context, s Step) (string, error) {
	switch s.Kind {
	case KindExtenderKill, KindSchedulerKill, KindPluginKill:
		c := in.component(s)
		if err := c.Kill(); err != nil {
			return c.Name(), fmt.Errorf("killing %s: %w", c.Name(), err)
		}
		sleep(ctx, s.Hold)
		return fmt.Sprintf("%s (down %.1fs)", c.Name(), s.Hold.Seconds()), in.start(ctx, c)
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
