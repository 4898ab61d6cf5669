package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/leader"
)

// TestDefaultListenIsLoopback: unless told otherwise the extender is reached
// only from its own host (kube-scheduler beside it), since its verbs can
// bind any pending GPU pod and inspect shows every GPU pod.
func TestDefaultListenIsLoopback(t *testing.T) {
	cfg, _, err := extender.ParseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		t.Fatal(err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Errorf("default --listen %q is not a loopback address", cfg.Listen)
	}
}

func TestHelpNamesTheFlags(t *testing.T) {
	var out bytes.Buffer
	if _, _, err := extender.ParseFlags([]string{"--help"}, &out); err == nil {
		t.Fatal("--help: no error")
	}
	for _, flag := range []string{"-listen", "-policy", "-kube-api-qps", "-assume-ttl", "-filter-best", "-version",
		"-tls-cert-file", "-tls-key-file", "-client-ca-file", "-metrics-listen", "-webhook-listen", "-webhook-tls-cert-file", "-webhook-tls-key-file", "-scheduler-name",
		"-leader-elect", "-follow-scheduler-lease", "-leader-elect-resource-namespace", "-leader-elect-resource-name", "-leader-elect-identity",
		"-leader-elect-lease-duration", "-leader-elect-renew-deadline", "-leader-elect-retry-period"} {
		if !strings.Contains(out.String(), flag) {
			t.Errorf("--help does not mention %s:\n%s", flag, out.String())
		}
	}
}

// TestServingFlags: the flag names the Helm chart uses land in the Config
// fields Run reads; the webhook's scheduler name defaults to
// gpushare-scheduler and everything else new is off.
func TestServingFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want extender.Config
	}{
		{name: "defaults", want: extender.Config{Listen: "127.0.0.1:39999", SchedulerName: "gpushare-scheduler", WebhookDRAUnit: "GiB"}},
		{
			name: "all set",
			args: []string{"--listen=:39999", "--tls-cert-file=/tls/tls.crt", "--tls-key-file=/tls/tls.key", "--client-ca-file=/tls/ca.crt",
				"--metrics-listen=:39998", "--webhook-listen=:9443", "--webhook-tls-cert-file=/wh/tls.crt", "--webhook-tls-key-file=/wh/tls.key", "--scheduler-name=gpu",
				"--webhook-dra-node-selector=gpushare.io/device-mode=dra", "--webhook-dra-memory-unit=MiB"},
			want: extender.Config{Listen: ":39999", TLSCertFile: "/tls/tls.crt", TLSKeyFile: "/tls/tls.key", ClientCAFile: "/tls/ca.crt",
				MetricsListen: ":39998", WebhookListen: ":9443", WebhookTLSCertFile: "/wh/tls.crt", WebhookTLSKeyFile: "/wh/tls.key", SchedulerName: "gpu",
				WebhookDRANodeSelector: "gpushare.io/device-mode=dra", WebhookDRAUnit: "MiB"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := extender.ParseFlags(tc.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			// Only the serving fields; the others have their own tests.
			only := cmpopts.IgnoreFields(extender.Config{}, "Kubeconfig", "Policy", "QPS", "Burst", "AssumeTTL", "FilterAll", "Timeouts", "CertCheckPeriod",
				"LeaderElect", "FollowSchedulerLease", "Election")
			if diff := cmp.Diff(tc.want, cfg, only); diff != "" {
				t.Errorf("Config (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLeaderFlags: the HA flags land in the Config, with client-go's usual
// durations and the pod name as identity, and Validate refuses the
// combinations that cannot work.
func TestLeaderFlags(t *testing.T) {
	t.Setenv("POD_NAME", "extender-0")
	tests := []struct {
		name    string
		args    []string
		want    extender.Config
		wantErr string
	}{
		{name: "off by default", args: nil,
			want: extender.Config{Election: leader.ElectConfig{Namespace: "kube-system", Name: "gpushare-scheduler-extender", Identity: "extender-0",
				LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}}},
		{name: "standalone replicas", args: []string{"--leader-elect", "--leader-elect-resource-namespace=gpu", "--leader-elect-resource-name=ext",
			"--leader-elect-identity=e1", "--leader-elect-lease-duration=30s", "--leader-elect-renew-deadline=20s", "--leader-elect-retry-period=4s"},
			want: extender.Config{LeaderElect: true, Election: leader.ElectConfig{Namespace: "gpu", Name: "ext", Identity: "e1",
				LeaseDuration: 30 * time.Second, RenewDeadline: 20 * time.Second, RetryPeriod: 4 * time.Second}}},
		{name: "sidecar", args: []string{"--follow-scheduler-lease=kube-system/kube-scheduler"},
			want: extender.Config{FollowSchedulerLease: "kube-system/kube-scheduler", Election: leader.ElectConfig{Namespace: "kube-system", Name: "gpushare-scheduler-extender", Identity: "extender-0",
				LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second}}},
		{name: "both", args: []string{"--leader-elect", "--follow-scheduler-lease=kube-system/kube-scheduler"}, wantErr: "exclude each other"},
		{name: "renew deadline not below the lease", args: []string{"--leader-elect", "--leader-elect-renew-deadline=15s"}, wantErr: "renew deadline (15s) < lease duration (15s)"},
		{name: "lease without namespace", args: []string{"--follow-scheduler-lease=kube-scheduler"}, wantErr: "want namespace/name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := extender.ParseFlags(tc.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Validate()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Validate() = %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			only := cmpopts.IgnoreFields(extender.Config{}, "Kubeconfig", "Policy", "QPS", "Burst", "AssumeTTL", "FilterAll", "Timeouts", "CertCheckPeriod",
				"Listen", "SchedulerName", "WebhookDRAUnit")
			if diff := cmp.Diff(tc.want, cfg, only); diff != "" {
				t.Errorf("Config (-want +got):\n%s", diff)
			}
		})
	}
}
