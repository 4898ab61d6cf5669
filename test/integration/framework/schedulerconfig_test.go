package framework

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"
)

// TestWriteSchedulerConfig: the shipped scheduler configurations, with the
// overrides Start applies, decode strictly as KubeSchedulerConfiguration v1
// (a misspelt field fails); the HTTPS one keeps enableHTTPS and gets the
// test's TLS files.
func TestWriteSchedulerConfig(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(root, "config", "kube-scheduler-config.yaml")
	https := filepath.Join(root, "config", "kube-scheduler-config-https.yaml")
	tests := []struct {
		name    string
		opts    Options
		wantTLS *configv1.ExtenderTLSConfig
		// wantLE is the leader election the replicas get; nil: none.
		wantLE  *election
		wantErr string
	}{
		{name: "plain", opts: Options{SchedulerConfig: plain, ExtenderURL: "http://127.0.0.1:1/gpushare-scheduler"}},
		{
			name:    "https",
			opts:    Options{SchedulerConfig: https, ExtenderURL: "https://127.0.0.1:1/gpushare-scheduler", ExtenderTLS: &ExtenderTLS{CertFile: "/c", KeyFile: "/k", CAFile: "/ca"}},
			wantTLS: &configv1.ExtenderTLSConfig{CertFile: "/c", KeyFile: "/k", CAFile: "/ca"},
		},
		{
			name:    "https without a client certificate",
			opts:    Options{SchedulerConfig: https, ExtenderURL: "https://127.0.0.1:1/gpushare-scheduler", ExtenderTLS: &ExtenderTLS{CAFile: "/ca"}},
			wantTLS: &configv1.ExtenderTLSConfig{CAFile: "/ca"},
		},
		{
			name: "replicas electing a leader",
			opts: Options{SchedulerConfig: plain, ExtenderURL: "http://127.0.0.1:1/gpushare-scheduler", SchedulerHA: &SchedulerHA{
				Replicas:      []SchedulerReplica{{Host: "scheduler-1"}, {Host: "scheduler-2", ExtenderURL: "http://127.0.0.1:2/gpushare-scheduler"}},
				RenewDeadline: 3 * time.Second,
			}},
			wantLE: &election{Elect: true, Lock: "leases", Namespace: "kube-system", Name: "kube-scheduler", Lease: 15 * time.Second, Renew: 3 * time.Second, Retry: 2 * time.Second},
		},
		{
			name:    "TLS files for a configuration without tlsConfig",
			opts:    Options{SchedulerConfig: plain, ExtenderURL: "https://127.0.0.1:1/gpushare-scheduler", ExtenderTLS: &ExtenderTLS{CAFile: "/ca"}},
			wantErr: "has no tlsConfig",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cp := &ControlPlane{dir: t.TempDir(), kubeconfigs: map[string]string{AdminUser: "/admin.kubeconfig"}}
			replicas, err := cp.schedulerReplicas(tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := []SchedulerReplica{{ExtenderURL: tc.opts.ExtenderURL}}
			if tc.opts.SchedulerHA != nil {
				want = tc.opts.SchedulerHA.Replicas
			}
			if len(replicas) != len(want) {
				t.Fatalf("%d replicas, want %d", len(replicas), len(want))
			}
			for r, w := range want {
				if w.ExtenderURL == "" {
					w.ExtenderURL = tc.opts.ExtenderURL
				}
				cfg := readSchedulerConfig(t, replicas[r].args[0])
				le := cfg.LeaderElection
				if tc.wantLE == nil {
					if le.LeaderElect == nil || *le.LeaderElect {
						t.Errorf("replica %d: leaderElect %v, want false", r, le.LeaderElect)
					}
				} else if diff := cmp.Diff(*tc.wantLE, election{
					Elect: *le.LeaderElect, Lock: le.ResourceLock, Namespace: le.ResourceNamespace, Name: le.ResourceName,
					Lease: le.LeaseDuration.Duration, Renew: le.RenewDeadline.Duration, Retry: le.RetryPeriod.Duration,
				}); diff != "" {
					t.Errorf("replica %d: leaderElection (-want +got):\n%s", r, diff)
				}
				checkExtenders(t, cfg, w.ExtenderURL, tc.wantTLS)
			}
		})
	}
}

// election is the part of leaderElection the replicas' configuration sets.
type election struct {
	Elect                 bool
	Lock, Namespace, Name string
	Lease, Renew, Retry   time.Duration
}

// readSchedulerConfig decodes the file of kube-scheduler's --config=FILE
// strictly (a misspelt field fails).
func readSchedulerConfig(t *testing.T, flag string) configv1.KubeSchedulerConfiguration {
	t.Helper()
	data, err := os.ReadFile(strings.TrimPrefix(flag, "--config="))
	if err != nil {
		t.Fatal(err)
	}
	var cfg configv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("%s does not decode strictly: %v", flag, err)
	}
	return cfg
}

// checkExtenders checks cfg's extenders: as shipped, pointed at url.
func checkExtenders(t *testing.T, cfg configv1.KubeSchedulerConfiguration, url string, wantTLS *configv1.ExtenderTLSConfig) {
	t.Helper()
	// As shipped: two entries, pointed at the test's extender: the GPU
	// entry (filter, bind, gpu-mem managed and gpu-count ignored by the
	// scheduler) and the claim pods' (filter only, ignorable, the marker
	// gpushare.io/dra-claim ignored by the scheduler). No entry
	// prioritizes pods that ask no GPU memory: those never wait on the
	// extender (issue 21).
	if len(cfg.Extenders) != 2 {
		t.Fatalf("%d extenders, want the 2 shipped", len(cfg.Extenders))
	}
	for i, ext := range cfg.Extenders {
		if ext.URLPrefix != url || cfg.ClientConnection.Kubeconfig != "/admin.kubeconfig" {
			t.Errorf("extender %d: urlPrefix %q kubeconfig %q not overridden", i, ext.URLPrefix, cfg.ClientConnection.Kubeconfig)
		}
		if ext.EnableHTTPS != (wantTLS != nil) {
			t.Errorf("extender %d: enableHTTPS = %v", i, ext.EnableHTTPS)
		}
		if diff := cmp.Diff(wantTLS, ext.TLSConfig); diff != "" {
			t.Errorf("extender %d: tlsConfig (-want +got):\n%s", i, diff)
		}
	}
	gpu := cfg.Extenders[0]
	wantManaged := []configv1.ExtenderManagedResource{
		{Name: "aliyun.com/gpu-mem", IgnoredByScheduler: false},
		{Name: "aliyun.com/gpu-count", IgnoredByScheduler: true},
	}
	if !gpu.NodeCacheCapable || gpu.BindVerb != "bind" || gpu.FilterVerb != "filter" || cmp.Diff(wantManaged, gpu.ManagedResources) != "" || gpu.Ignorable {
		t.Errorf("extender 0 %+v: want filter, bind, nodeCacheCapable, the managed resources, not ignorable, as shipped", gpu)
	}
	if gpu.PrioritizeVerb != "" {
		t.Errorf("extender 0 prioritizeVerb %q, want none shipped (the opt-in file adds it)", gpu.PrioritizeVerb)
	}
	claims := cfg.Extenders[1]
	wantMarker := []configv1.ExtenderManagedResource{{Name: "gpushare.io/dra-claim", IgnoredByScheduler: true}}
	if !claims.NodeCacheCapable || claims.FilterVerb != "filter" || claims.BindVerb != "" || claims.PrioritizeVerb != "" || claims.PreemptVerb != "" ||
		!claims.Ignorable || cmp.Diff(wantMarker, claims.ManagedResources) != "" {
		t.Errorf("extender 1 %+v: want filter only, nodeCacheCapable, ignorable, the marker ignored by the scheduler, as shipped", claims)
	}
}
