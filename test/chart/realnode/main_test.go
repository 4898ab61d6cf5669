package realnode

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/node"
)

// shared is the cluster every test of this package uses: one real node
// per machine, started by the first test that needs it and stopped by
// TestMain.
var shared struct {
	once    sync.Once
	c       *Cluster
	err     error
	dir     string
	mu      sync.Mutex
	failed  bool // a test using it failed: keep dir
	started time.Duration
}

var kubernetesFlag = flag.String("realnode.kubernetes", framework.KubernetesVersion, "the Kubernetes version of the control plane and the node: "+framework.KubernetesVersion+" or "+framework.KubernetesVersionOldest+" (kubelet 1.36 and later need -realnode.runtime=containerd-2)")

var runtimeFlag = flag.String("realnode.runtime", "", "the real node's container runtime: containerd-1.6 (Debian's; ignores CDI devices) or containerd-2 (built from its module; applies them); default: containerd-2 for kubelet 1.36 and later, else containerd-1.6")

// startTimeout bounds the start: binaries and images are built when
// missing (a cold Kubernetes build is about 20 minutes on two cores).
const startTimeout = 45 * time.Minute

// cluster returns the shared cluster, starting it on first use. It skips
// the test in -short mode, off Linux and when not root.
func cluster(t *testing.T) *Cluster {
	t.Helper()
	switch {
	case testing.Short():
		t.Skip("real node: skipped in -short mode")
	case runtime.GOOS != "linux":
		t.Skip("real node: Linux only (containerd, runc, kubelet)")
	case os.Geteuid() != 0:
		t.Skip("real node: needs root (containerd, runc, kubelet, iptables, mounts); CI runs it as root")
	}
	shared.once.Do(func() {
		var rt node.Runtime
		if *runtimeFlag != "" {
			rt, shared.err = node.ParseRuntime(*runtimeFlag)
			if shared.err != nil {
				return
			}
		}
		shared.dir, shared.err = os.MkdirTemp("", "gpushare-realnode-")
		if shared.err != nil {
			return
		}
		progress, err := os.Create(filepath.Join(shared.dir, "progress.log"))
		if err != nil {
			shared.err = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		start := time.Now()
		shared.c, shared.err = Start(ctx, Options{Dir: shared.dir, Purpose: "go test ./realnode", Out: progress, Runtime: rt, KubernetesVersion: *kubernetesFlag})
		shared.started = time.Since(start)
		if shared.c != nil {
			for _, s := range shared.c.Timings {
				t.Logf("start: %-20s %s", s.Step, s.Duration.Round(100*time.Millisecond))
			}
		}
	})
	if shared.err != nil {
		t.Fatalf("starting the real node: %v (logs in %s)", shared.err, shared.dir)
	}
	t.Logf("real node up (start took %s; logs in %s)", shared.started.Round(time.Second), shared.dir)
	t.Cleanup(func() {
		if t.Failed() {
			shared.mu.Lock()
			shared.failed = true
			shared.mu.Unlock()
		}
	})
	return shared.c
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.c != nil {
		if err := shared.c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "realnode: stopping the real node:", err)
			code = 1
		}
	}
	if shared.dir != "" {
		if code != 0 || shared.failed || shared.err != nil {
			fmt.Fprintln(os.Stderr, "realnode: logs kept in", shared.dir)
		} else {
			_ = os.RemoveAll(shared.dir)
		}
	}
	os.Exit(code)
}
