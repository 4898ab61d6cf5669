package main

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpushare/gpushare/pkg/extender"
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
		"-tls-cert-file", "-tls-key-file", "-client-ca-file", "-metrics-listen", "-webhook-listen", "-webhook-tls-cert-file", "-webhook-tls-key-file", "-scheduler-name"} {
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
		{name: "defaults", want: extender.Config{Listen: "127.0.0.1:39999", SchedulerName: "gpushare-scheduler"}},
		{
			name: "all set",
			args: []string{"--listen=:39999", "--tls-cert-file=/tls/tls.crt", "--tls-key-file=/tls/tls.key", "--client-ca-file=/tls/ca.crt",
				"--metrics-listen=:39998", "--webhook-listen=:9443", "--webhook-tls-cert-file=/wh/tls.crt", "--webhook-tls-key-file=/wh/tls.key", "--scheduler-name=gpu"},
			want: extender.Config{Listen: ":39999", TLSCertFile: "/tls/tls.crt", TLSKeyFile: "/tls/tls.key", ClientCAFile: "/tls/ca.crt",
				MetricsListen: ":39998", WebhookListen: ":9443", WebhookTLSCertFile: "/wh/tls.crt", WebhookTLSKeyFile: "/wh/tls.key", SchedulerName: "gpu"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _, err := extender.ParseFlags(tc.args, &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			// Only the serving fields; the others have their own tests.
			only := cmpopts.IgnoreFields(extender.Config{}, "Kubeconfig", "Policy", "QPS", "Burst", "AssumeTTL", "FilterAll", "Timeouts", "CertCheckPeriod")
			if diff := cmp.Diff(tc.want, cfg, only); diff != "" {
				t.Errorf("Config (-want +got):\n%s", diff)
			}
		})
	}
}
