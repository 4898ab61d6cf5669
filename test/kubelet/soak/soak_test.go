package soak_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpushare/gpushare/test/kubelet/cluster"
	"github.com/gpushare/gpushare/test/kubelet/soak"
)

var (
	seedFlag     = flag.Uint64("soak.seed", 0, "seed of the run (workload and faults); 0 draws one from the clock")
	durationFlag = flag.Duration("soak.duration", time.Minute, "how long faults are injected (make soak: DURATION)")
	faultsFlag   = flag.Int("soak.min-faults", 20, "the fewest faults a run injects")
	nodesFlag    = flag.Int("soak.nodes", 4, "simulated GPU nodes (cluster.DefaultNodes)")
	overlapFlag  = flag.Int("soak.overlap", 2, "faults in flight together at most (1: one after the other)")
	replicaFlag  = flag.Int("soak.schedulers", 2, "kube-scheduler replicas electing a leader, each with its extender sidecar (1: one kube-scheduler and one extender, no election)")
	twoCardFlag  = flag.Int("soak.max-two-card", -1, "live pods split over two cards at most; negative: no bound (the default), 0: a quarter of the cards")
)

// TestSoak runs the chaos soak on a fresh cluster of four simulated GPU
// nodes, two kube-scheduler replicas electing a leader each with its
// extender sidecar, up to two faults in flight together (make test: the
// short form, a minute of faults and at least 20; make soak: DURATION,
// SEED) and fails on any violation. The seed is printed first and in the
// summary line; -soak.seed replays its decisions.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a control plane, the extender and simulated GPU nodes")
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()%1_000_000_000) + 1
	}
	t.Logf("seed %d (replay: make soak SEED=%d DURATION=%s)", seed, seed, *durationFlag)
	dir, err := os.MkdirTemp("", "gpushare-soak-")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute+4*(*durationFlag)) // a cold control-plane build, and the run
	defer cancel()
	start := time.Now()
	bins, err := cluster.Build(ctx, filepath.Join(dir, "bin"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("binaries built in %.1fs", time.Since(start).Seconds())
	start = time.Now()
	c, err := cluster.Start(ctx, cluster.Config{
		Dir:               dir,
		Bins:              bins,
		Nodes:             cluster.DefaultNodes(*nodesFlag),
		SchedulerReplicas: *replicaFlag,
		RecoveryWindow:    2 * time.Second,
		VerifyPeriod:      2 * time.Second,
		Verbosity:         2,
	})
	if err != nil {
		t.Fatalf("starting the cluster (logs in %s): %v", filepath.Join(dir, "logs"), err)
	}
	t.Logf("cluster up in %.1fs", time.Since(start).Seconds())
	defer func() {
		start := time.Now()
		c.Stop()
		t.Logf("cluster stopped in %.1fs", time.Since(start).Seconds())
		if t.Failed() {
			t.Logf("logs kept in %s", c.LogsDir())
			return
		}
		_ = os.RemoveAll(dir)
	}()
	s, violations, err := soak.Run(ctx, c, soak.Config{Seed: seed, Duration: *durationFlag, MinFaults: *faultsFlag, Overlap: *overlapFlag, MaxTwoCardPods: *twoCardFlag, Out: os.Stdout})
	if err != nil {
		t.Error(err)
	}
	for _, v := range violations {
		t.Error(v)
	}
	if s.Violations > 0 {
		t.Errorf("%d violations; replay with make soak SEED=%d", s.Violations, seed)
	}
}
