package extender

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/certs/certstest"
	"github.com/gpushare/gpushare/pkg/webhook"
	"github.com/gpushare/gpushare/test/util"
)

// TestDRAConversionLabels: every KEY=VALUE pair of
// --webhook-dra-node-selector is a label of the DRA nodes.
func TestDRAConversionLabels(t *testing.T) {
	c := Config{WebhookDRANodeSelector: "zone=a,gpushare.io/device-mode=dra", WebhookDRAUnit: "GiB"}
	d, err := c.draConversion(nil, webhook.InformerQuotas{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"gpushare.io/device-mode": "dra", "zone": "a"}, d.NodeSelector); diff != "" {
		t.Errorf("DRA node labels (-want +got):\n%s", diff)
	}
}

func TestValidateServing(t *testing.T) {
	base := func(edit func(*Config)) Config {
		c := Config{Listen: "127.0.0.1:39999", Policy: allocator.DefaultPolicy, QPS: 1, Burst: 1, SchedulerName: webhook.DefaultSchedulerName}
		edit(&c)
		return c
	}
	tls := func(c *Config) { c.TLSCertFile, c.TLSKeyFile = "/t/tls.crt", "/t/tls.key" }
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // "" for valid
	}{
		{name: "plain HTTP", cfg: base(func(*Config) {})},
		{name: "HTTPS", cfg: base(tls)},
		{name: "a certificate without its key", cfg: base(func(c *Config) { c.TLSCertFile = "/t/tls.crt" }), wantErr: "--tls-cert-file and --tls-key-file go together"},
		{name: "client CA without TLS", cfg: base(func(c *Config) { c.ClientCAFile, c.MetricsListen = "/t/ca.crt", ":39998" }), wantErr: "--client-ca-file needs --tls-cert-file"},
		{name: "client CA without a plain listener for probes", cfg: base(func(c *Config) { tls(c); c.ClientCAFile = "/t/ca.crt" }), wantErr: "--client-ca-file needs --metrics-listen"},
		{name: "client CA with a metrics listener", cfg: base(func(c *Config) { tls(c); c.ClientCAFile, c.MetricsListen = "/t/ca.crt", ":39998" })},
		{name: "bad metrics address", cfg: base(func(c *Config) { c.MetricsListen = "39998" }), wantErr: "--metrics-listen"},
		{name: "metrics on the API's address", cfg: base(func(c *Config) { c.MetricsListen = c.Listen }), wantErr: "--listen and --metrics-listen are both"},
		{name: "webhook without a certificate", cfg: base(func(c *Config) { c.WebhookListen = ":9443" }), wantErr: "--webhook-listen needs --webhook-tls-cert-file"},
		{name: "webhook certificate without the listener", cfg: base(func(c *Config) { c.WebhookTLSCertFile, c.WebhookTLSKeyFile = "/w/c", "/w/k" }), wantErr: "need --webhook-listen"},
		{name: "webhook with a bad scheduler name", cfg: base(func(c *Config) {
			c.WebhookListen, c.WebhookTLSCertFile, c.WebhookTLSKeyFile, c.SchedulerName = ":9443", "/w/c", "/w/k", "GPU_Scheduler"
		}), wantErr: "--scheduler-name"},
		{name: "webhook", cfg: base(func(c *Config) { c.WebhookListen, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = ":9443", "/w/c", "/w/k" })},
		{name: "DRA conversion", cfg: base(func(c *Config) {
			c.WebhookListen, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = ":9443", "/w/c", "/w/k"
			c.WebhookDRANodeSelector, c.WebhookDRAUnit = "gpushare.io/device-mode=dra", "GiB"
		})},
		{name: "DRA conversion without the webhook", cfg: base(func(c *Config) { c.WebhookDRANodeSelector, c.WebhookDRAUnit = "gpushare.io/device-mode=dra", "GiB" }),
			wantErr: "--webhook-dra-node-selector needs --webhook-listen"},
		{name: "DRA conversion without a value", cfg: base(func(c *Config) {
			c.WebhookListen, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = ":9443", "/w/c", "/w/k"
			c.WebhookDRANodeSelector, c.WebhookDRAUnit = "gpushare.io/device-mode", "GiB"
		}), wantErr: "want KEY=VALUE"},
		{name: "DRA conversion on two labels", cfg: base(func(c *Config) {
			c.WebhookListen, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = ":9443", "/w/c", "/w/k"
			c.WebhookDRANodeSelector, c.WebhookDRAUnit = "gpushare.io/device-mode=dra,zone=a", "GiB"
		})},
		{name: "DRA conversion with a label twice", cfg: base(func(c *Config) {
			c.WebhookListen, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = ":9443", "/w/c", "/w/k"
			c.WebhookDRANodeSelector, c.WebhookDRAUnit = "zone=a,zone=b", "GiB"
		}), wantErr: "label zone given twice"},
		{name: "DRA conversion with an empty pair", cfg: base(func(c *Config) {
			c.WebhookListen, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = ":9443", "/w/c", "/w/k"
			c.WebhookDRANodeSelector, c.WebhookDRAUnit = "zone=a,", "GiB"
		}), wantErr: "want KEY=VALUE"},
		{name: "DRA conversion with a bad unit", cfg: base(func(c *Config) {
			c.WebhookListen, c.WebhookTLSCertFile, c.WebhookTLSKeyFile = ":9443", "/w/c", "/w/k"
			c.WebhookDRANodeSelector, c.WebhookDRAUnit = "gpushare.io/device-mode=dra", "GB"
		}), wantErr: `memory unit "GB"`},
		{name: "profiling without a metrics listener", cfg: base(func(c *Config) { c.Profiling = true }), wantErr: "--profiling needs --metrics-listen"},
		{name: "profiling", cfg: base(func(c *Config) { c.Profiling, c.MetricsListen = true, ":39998" })},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("Validate = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

// tlsClient returns an HTTPS client trusting ca, presenting client if set,
// opening a new connection (a new handshake) for every request.
func tlsClient(t *testing.T, ca *certstest.CA, client *certstest.Pair) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if client != nil {
		c, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg, DisableKeepAlives: true}}
}

// TestRunServesTLS runs the extender as the Helm chart does: the API over
// HTTPS taking only client certificates of the scheduler's CA, the probes
// and metrics on a plain listener, the webhook over HTTPS. A client
// without a certificate or with one of another CA is refused and the
// refusal logged; a rotated certificate is served without a restart.
func TestRunServesTLS(t *testing.T) {
	t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))

	serverCA, schedulerCA, otherCA := certstest.NewCA(t, "serving"), certstest.NewCA(t, "scheduler-clients"), certstest.NewCA(t, "other")
	tlsDir, webhookDir := t.TempDir(), t.TempDir()
	first := serverCA.Server(t)
	certstest.WriteSecretVolume(t, tlsDir, map[string][]byte{certstest.CertFile: first.CertPEM, certstest.KeyFile: first.KeyPEM, certstest.CAFile: schedulerCA.PEM})
	certstest.WriteSecretVolume(t, webhookDir, certstest.SecretFiles(serverCA, serverCA.Server(t, "gpushare-webhook.kube-system.svc")))
	api, metricsAddr, webhookAddr := util.FreeAddr(t), util.FreeAddr(t), util.FreeAddr(t)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, Config{Kubeconfig: nowhereKubeconfig(t), Listen: api, Policy: allocator.NameBinpack, QPS: 1, Burst: 1,
			TLSCertFile: filepath.Join(tlsDir, certstest.CertFile), TLSKeyFile: filepath.Join(tlsDir, certstest.KeyFile),
			ClientCAFile: filepath.Join(tlsDir, certstest.CAFile), MetricsListen: metricsAddr,
			WebhookListen: webhookAddr, WebhookTLSCertFile: filepath.Join(webhookDir, certstest.CertFile), WebhookTLSKeyFile: filepath.Join(webhookDir, certstest.KeyFile),
			SchedulerName: webhook.DefaultSchedulerName, CertCheckPeriod: time.Hour})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	plain := &http.Client{Timeout: 5 * time.Second}
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		resp, err := plain.Get("http://" + metricsAddr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("metrics listener not serving: %v", err)
		}
	}
	get := func(c *http.Client, url string) (int, string, error) {
		resp, err := c.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}

	scheduler := schedulerCA.Client(t, "kube-scheduler")
	if code, _, err := get(tlsClient(t, serverCA, &scheduler), "https://"+api+Prefix+"/inspect"); err != nil || code != http.StatusOK {
		t.Errorf("inspect with the scheduler's certificate: %d %v", code, err)
	}
	foreign := otherCA.Client(t, "kube-scheduler")
	for name, client := range map[string]*http.Client{"no client certificate": tlsClient(t, serverCA, nil), "a certificate of another CA": tlsClient(t, serverCA, &foreign)} {
		if code, _, err := get(client, "https://"+api+"/healthz"); err == nil {
			t.Errorf("%s: answered %d, want the handshake refused", name, code)
		}
	}
	if code, _, err := get(plain, "http://"+api+"/healthz"); err == nil && code == http.StatusOK {
		t.Error("plain HTTP on the HTTPS listener answered 200")
	}
	for start := time.Now(); !strings.Contains(logs.String(), "TLS handshake error"); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the refused handshakes were not logged:\n%s", logs.String())
		}
	}

	// The plain listener: probes and metrics, nothing that names a pod.
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 503, "/metrics": 200, "/version": 200, Prefix + "/inspect": 404, Prefix + "/filter": 404} {
		if code, _, err := get(plain, "http://"+metricsAddr+path); err != nil || code != want {
			t.Errorf("GET %s on the metrics listener = %d %v, want %d", path, code, err, want)
		}
	}
	fams := scrapeHandler(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		resp, err := plain.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		_, _ = io.Copy(w, resp.Body)
	}))
	if v, ok := value(fams, "gpushare_extender_tls_certificate_expiry_timestamp_seconds", map[string]string{"listener": "extender"}); !ok || int64(v) != first.NotAfter.Unix() {
		t.Errorf("extender certificate expiry = %v (present %v), want %d", v, ok, first.NotAfter.Unix())
	}
	for _, name := range []string{"gpushare_webhook_admissions_total", "gpushare_extender_pending_pods", "gpushare_extender_cache_rebuild_seconds", "gpushare_extender_tls_reload_failures_total"} {
		if fams[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}

	// The webhook answers the API server over HTTPS.
	pod, err := json.Marshal(util.MakePod("p").GPUMem(4).Obj())
	if err != nil {
		t.Fatal(err)
	}
	review, err := json.Marshal(admissionv1.AdmissionReview{TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "r", Operation: admissionv1.Create, Resource: metav1.GroupVersionResource{Version: "v1", Resource: "pods"}, Object: runtime.RawExtension{Raw: pod}}})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tlsClient(t, serverCA, nil).Post("https://"+webhookAddr+webhook.Path, "application/json", strings.NewReader(string(review)))
	if err != nil {
		t.Fatal(err)
	}
	var out admissionv1.AdmissionReview
	err = json.NewDecoder(resp.Body).Decode(&out)
	resp.Body.Close()
	if err != nil || out.Response == nil || !strings.Contains(string(out.Response.Patch), webhook.DefaultSchedulerName) {
		t.Errorf("webhook answer %+v (%v), want the scheduler-name patch", out.Response, err)
	}

	// A rotated certificate is served to new connections, no restart.
	second := serverCA.Server(t)
	certstest.WriteSecretVolume(t, tlsDir, map[string][]byte{certstest.CertFile: second.CertPEM, certstest.KeyFile: second.KeyPEM, certstest.CAFile: schedulerCA.PEM})
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if s := servedSerial(t, api, serverCA, &scheduler); s.Cmp(second.Serial) == 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("the rotated certificate is not served")
		}
	}
}

// servedSerial dials addr over TLS trusting ca, presenting client, and
// returns the serial of the certificate the server presents.
func servedSerial(t *testing.T, addr string, ca *certstest.CA, client *certstest.Pair) *big.Int {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	c, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}
