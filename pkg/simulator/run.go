package simulator

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// DefaultPolicies is the --policy default: the study's baselines, then
// FGD and our default.
var DefaultPolicies = []string{allocator.NameRandom, allocator.NameSpread, allocator.NameBinpack,
	allocator.NameBestFit, allocator.NameFGD, allocator.NameFragAware}

// Config is a batch of replays, every policy with every seed (RunAll).
type Config struct {
	Policies []string
	Seeds    []uint64
	Inflate  float64
	CPUPods  CPUPods
	// GPUOnly: see Options.GPUOnly.
	GPUOnly bool
	// Scheduler: see Options.Scheduler.
	Scheduler *Scheduler
	// Topology is the chart topology replayed (ForTopology).
	Topology Topology
	// IdleTaintMinCards: Options.IdleTaintMinCards.
	IdleTaintMinCards *int
	// PercentageOfNodesToScore: see Options.PercentageOfNodesToScore.
	PercentageOfNodesToScore *int32
	// Parallel replays at once.
	Parallel int
	// Progress, when not nil, gets one line per finished replay.
	Progress io.Writer
}

// RunAll replays tr for every policy and seed of cfg, cfg.Parallel at a
// time, and returns a summary per policy in cfg.Policies order.
func RunAll(ctx context.Context, tr *trace.Trace, cfg *Config) ([]Summary, error) {
	type job struct{ p, s int }
	results := make([][]*Result, len(cfg.Policies))
	for i := range results {
		results[i] = make([]*Result, len(cfg.Seeds))
	}
	jobs := make(chan job)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range max(1, cfg.Parallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				res, err := Run(ctx, tr, Options{Policy: cfg.Policies[j.p], Seed: cfg.Seeds[j.s], Inflate: cfg.Inflate, CPUPods: cfg.CPUPods, GPUOnly: cfg.GPUOnly,
					Scheduler: cfg.Scheduler, Topology: cfg.Topology, PercentageOfNodesToScore: cfg.PercentageOfNodesToScore,
					IdleTaintMinCards: cfg.IdleTaintMinCards})
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				if err == nil {
					results[j.p][j.s] = res
					if cfg.Progress != nil {
						fmt.Fprintf(cfg.Progress, "simulate: %s seed %d: %s%% allocated at 100%% arrival, %d failed, %.1f s\n",
							res.Policy, res.Seed, Pct(res.AllocAt(100)), res.FailedTotal(), res.Seconds)
					}
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for p := range cfg.Policies {
		for s := range cfg.Seeds {
			select {
			case jobs <- job{p, s}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sums := make([]Summary, len(cfg.Policies))
	for i, p := range cfg.Policies {
		sums[i] = Summarize(p, results[i])
	}
	return sums, nil
}
