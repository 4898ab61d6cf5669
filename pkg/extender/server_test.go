package extender

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/leader"
	"github.com/gpushare/gpushare/test/util"
)

// run builds the extender of cfg and serves it, as the command does.
func run(ctx context.Context, cfg Config) error {
	e, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	return e.Run(ctx)
}

// TestServerCutsOffStalledClients: a client that sends a request's headers
// and then stalls in its body, or holds an idle connection, is cut off at
// the server's timeouts instead of holding a connection and a goroutine
// for as long as it likes.
func TestServerCutsOffStalledClients(t *testing.T) {
	// Run turns on client-go's streaming lists for the whole process unless
	// this is set; the fake clientsets of later tests cannot serve them.
	t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	// The API server is nowhere: the informers never sync, the server
	// serves regardless.
	kc := nowhereKubeconfig(t)
	addr := util.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, Config{Kubeconfig: kc, Listen: addr, Policy: allocator.NameBinpack, QPS: 1, Burst: 1,
			Timeouts: Timeouts{ReadHeader: 200 * time.Millisecond, Read: 300 * time.Millisecond, Write: time.Second, Idle: 300 * time.Millisecond}})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("extender not serving: %v", err)
		}
	}
	for _, tc := range []struct{ name, send string }{
		{"stalled body", "POST /gpushare-scheduler/filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"Pod\":"},
		{"idle keep-alive connection", "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write([]byte(tc.send)); err != nil {
				t.Fatal(err)
			}
			// Read whatever the server answers until it closes the
			// connection; it must within a few of its timeouts.
			if err := conn.SetReadDeadline(time.Now().Add(3 * time.Second)); err != nil {
				t.Fatal(err)
			}
			var got strings.Builder
			buf := make([]byte, 4096)
			for {
				n, err := conn.Read(buf)
				got.Write(buf[:n])
				var ne net.Error
				switch {
				case err == nil:
					continue
				case errors.As(err, &ne) && ne.Timeout():
					t.Fatalf("connection still open after 3 s (read so far: %q)", got.String())
				}
				return // closed by the server
			}
		})
	}
}

// TestNewBuildsWithoutServing: New refuses an invalid configuration and
// builds a valid one without listening or calling the API; its handlers
// answer before Run.
func TestNewBuildsWithoutServing(t *testing.T) {
	// New turns on client-go's streaming lists for the whole process unless
	// this is set; the fake clientsets of later tests cannot serve them.
	t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	_, ctx := ktesting.NewTestContext(t)
	if _, err := New(ctx, Config{Listen: DefaultListen, Policy: allocator.NameBinpack}); err == nil || !strings.Contains(err.Error(), "--kube-api-qps") {
		t.Errorf("New(no QPS) = %v, want the flags' error", err)
	}
	addr, metricsAddr := util.FreeAddr(t), util.FreeAddr(t)
	e, err := New(ctx, Config{Kubeconfig: nowhereKubeconfig(t), Listen: addr, MetricsListen: metricsAddr, Policy: allocator.NameBinpack, QPS: 1, Burst: 1, LeaderElect: true,
		Election: leader.ElectConfig{Namespace: "kube-system", Name: "l", Identity: "me", LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if conn, err := net.Dial("tcp", addr); err == nil {
		conn.Close()
		t.Errorf("New listens on %s", addr)
	}
	var names []string
	for _, ep := range e.endpoints {
		names = append(names, ep.name)
	}
	if diff := cmp.Diff([]string{"extender", "metrics"}, names); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		rec := httptest.NewRecorder()
		e.endpoints[0].handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != want {
			t.Errorf("GET %s before Run = %d, want %d", path, rec.Code, want)
		}
	}
	if e.gate == nil || e.preemptor == nil {
		t.Errorf("gate %v, preemptor %v: want both", e.gate, e.preemptor)
	}
}

// nowhereKubeconfig writes a kubeconfig whose API server is nowhere: the
// informers never sync, the extender serves regardless.
func nowhereKubeconfig(t *testing.T) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestProfilingRoutes: the profiles are served only when --profiling is
// on, and the probe routes stay where they were either way.
func TestProfilingRoutes(t *testing.T) {
	probes := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("profiling=%v", on), func(t *testing.T) {
			h := withProfiling(probes, on)
			for path, want := range map[string]int{
				"/healthz":             http.StatusOK,
				"/debug/pprof/":        map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on],
				"/debug/pprof/cmdline": map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[on],
			} {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != want {
					t.Errorf("GET %s: %d, want %d", path, rec.Code, want)
				}
			}
		})
	}
}
