// Package e2e_test runs gpushare end to end on this machine: a real etcd,
// kube-apiserver and kube-scheduler, the extender process, and three
// simulated GPU nodes (node agent with kubelet's own device manager + the
// device plugin process), shared by the tests; see cluster.
package e2e_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/test/kubelet/cluster"
)

// The cluster every test shares: starting one takes a few seconds, and the
// tests run one after the other, each in its own namespace, each leaving no
// pod behind.
var (
	shared struct {
		once sync.Once
		c    *cluster.Cluster
		dir  string
		err  error
	}
	// failed is set by any failing test; the cluster's directory (logs) is
	// then kept.
	failedMu sync.Mutex
	failed   bool
)

// recoveryWindow is the device plugins' --recovery-window in these tests.
const recoveryWindow = 2 * time.Second

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if shared.c != nil {
		procs := shared.c.Processes()
		shared.c.Stop()
		// Every process the run started must be gone.
		for _, p := range procs {
			if argv, err := cluster.Cmdline(p.PID); err == nil && argv[0] == p.Exe {
				fmt.Fprintf(os.Stderr, "e2e: %s (pid %d) still running after Stop\n", p.Name, p.PID)
				code = 1
			}
		}
		failedMu.Lock()
		keep := failed || code != 0
		failedMu.Unlock()
		if keep {
			fmt.Fprintf(os.Stderr, "e2e: logs kept in %s\n", filepath.Join(shared.dir, "logs"))
		} else {
			_ = os.RemoveAll(shared.dir)
		}
	}
	os.Exit(code)
}

// start returns the shared cluster, starting it on first use: 3 nodes
// (4×T4 16 GiB, 2×A100 80 GiB, 8×V100 32 GiB), binaries built fresh from
// this tree.
func start(t *testing.T) *cluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a control plane, the extender and three simulated GPU nodes")
	}
	t.Cleanup(func() {
		if t.Failed() {
			failedMu.Lock()
			failed = true
			failedMu.Unlock()
		}
	})
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute) // a cold control-plane build
		defer cancel()
		shared.dir, shared.err = os.MkdirTemp("", "gpushare-e2e-")
		if shared.err != nil {
			return
		}
		begin := time.Now()
		bins, err := cluster.Build(ctx, filepath.Join(shared.dir, "bin"), nil)
		if err != nil {
			shared.err = err
			return
		}
		built := time.Since(begin)
		shared.c, shared.err = cluster.Start(ctx, cluster.Config{
			Dir:            shared.dir,
			Bins:           bins,
			Nodes:          cluster.DefaultNodes(3),
			RecoveryWindow: recoveryWindow,
			VerifyPeriod:   2 * time.Second,
			Verbosity:      2,
		})
		t.Logf("binaries built in %.1fs; cluster (control plane, extender, 3 nodes) up in %.1fs; dir %s",
			built.Seconds(), (time.Since(begin) - built).Seconds(), shared.dir)
	})
	if shared.err != nil {
		t.Fatalf("starting the cluster: %v", shared.err)
	}
	return shared.c
}
