package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/certs/certstest"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// servingExtender is an extender run in this process with a serving
// configuration (TLS, metrics listener, webhook), its log kept.
type servingExtender struct {
	logs ktesting.Buffer
	// stop ends it and waits; it may be called more than once.
	stop func()
}

// runExtender runs the extender with cfg until the test ends or stop, and
// waits until /readyz on cfg.MetricsListen answers 200.
func runExtender(t *testing.T, cfg extender.Config) *servingExtender {
	t.Helper()
	return runExtenderUntil(t, cfg, "/readyz")
}

// runExtenderUntil is runExtender waiting for path on cfg.MetricsListen
// (/healthz for a replica that may not lead).
func runExtenderUntil(t *testing.T, cfg extender.Config, path string) *servingExtender {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger.WithName("extender")))
	done := make(chan error, 1)
	go func() { done <- runExtenderConfig(ctx, cfg) }()
	var once sync.Once
	e := &servingExtender{logs: logger.GetSink().(ktesting.Underlier).GetBuffer(), stop: func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("extender: %v", err)
			}
		})
	}}
	t.Cleanup(e.stop)
	waitExtenderAnswers(t, cfg.MetricsListen, path, done)
	return e
}

// scrapeMetrics GETs url and parses the Prometheus text format.
func scrapeMetrics(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// metricValue is the counter or gauge value of family's series with exactly
// labels.
func metricValue(fams map[string]*dto.MetricFamily, family string, labels map[string]string) (float64, bool) {
	for _, m := range fams[family].GetMetric() {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if !maps.Equal(labels, got) {
			continue
		}
		if m.Counter != nil {
			return m.Counter.GetValue(), true
		}
		return m.Gauge.GetValue(), true
	}
	return 0, false
}

// tlsConfig trusts ca and presents client.
func tlsConfig(t *testing.T, ca *certstest.CA, client certstest.Pair) *tls.Config {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	c, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}
}

// servedSerial is the serial of the certificate addr presents to a new
// connection.
func servedSerial(t *testing.T, addr string, cfg *tls.Config) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestExtenderOverHTTPS: the real kube-scheduler, loading
// config/kube-scheduler-config-https.yaml, calls the extender over HTTPS
// with a client certificate of the CA the extender trusts: pods are bound
// with their allocations, and the metrics agree with inspect. A serving
// certificate rotated on disk is served without a restart. An extender
// that trusts another CA refuses the scheduler: the pod stays pending with
// the TLS error, and the extender logs the refused handshake.
func TestExtenderOverHTTPS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	servingCA, schedulerCA, otherCA := certstest.NewCA(t, "extender-serving"), certstest.NewCA(t, "scheduler-clients"), certstest.NewCA(t, "other")
	extDir, schedDir := t.TempDir(), t.TempDir()
	serving := servingCA.Server(t)
	certstest.WriteSecretVolume(t, extDir, map[string][]byte{certstest.CertFile: serving.CertPEM, certstest.KeyFile: serving.KeyPEM, certstest.CAFile: schedulerCA.PEM})
	schedulerCert := schedulerCA.Client(t, "kube-scheduler")
	certstest.WriteSecretVolume(t, schedDir, map[string][]byte{certstest.CertFile: schedulerCert.CertPEM, certstest.KeyFile: schedulerCert.KeyPEM, certstest.CAFile: servingCA.PEM})

	listen, metrics := util.FreeAddr(t), util.FreeAddr(t)
	cp := framework.StartT(t, framework.Options{
		ExtenderURL:     "https://" + listen + extender.Prefix,
		SchedulerConfig: filepath.Join(root, "config", "kube-scheduler-config-https.yaml"),
		ExtenderTLS: &framework.ExtenderTLS{CertFile: filepath.Join(schedDir, certstest.CertFile),
			KeyFile: filepath.Join(schedDir, certstest.KeyFile), CAFile: filepath.Join(schedDir, certstest.CAFile)},
	})
	admin := cp.Client(framework.AdminUser)
	applyManifests(t, admin, "manifests/extender/rbac.yaml")
	kc, err := cp.ServiceAccountKubeconfig(ctx, "kube-system", "gpushare-scheduler-extender", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cfg := extender.Config{Kubeconfig: kc, Listen: listen, Policy: allocator.DefaultPolicy, QPS: 200, Burst: 400,
		TLSCertFile: filepath.Join(extDir, certstest.CertFile), TLSKeyFile: filepath.Join(extDir, certstest.KeyFile),
		ClientCAFile: filepath.Join(extDir, certstest.CAFile), MetricsListen: metrics}
	ext := runExtender(t, cfg)
	c := &cluster{cp: cp, admin: admin, kubeconfig: kc, listen: listen, stop: ext.stop}
	c.addNode(t, util.MakeNode("t4").Cards("Tesla-T4", 16, 16).Obj())
	c.addNode(t, util.MakeNode("a100").Cards("A100-SXM4-40GB", 40).Obj())

	// The 20 GiB pod first (it fits only the A100); then the others fit
	// whatever cards the policy picks.
	c.createPod(t, util.MakePod("p0").GPUMem(20).Obj())
	c.waitBound(t, []string{"p0"}, 60*time.Second)
	names := []string{"p0"}
	for i, units := range []int64{12, 8, 4, 6, 2} {
		p := util.MakePod(fmt.Sprintf("p%d", i+1)).GPUMem(units).Obj()
		c.createPod(t, p)
		names = append(names, p.Name)
	}
	c.waitBound(t, names, 60*time.Second)
	if got := c.checkNoOvercommit(t); got != len(names) {
		t.Errorf("checked %d bound pods, want %d", got, len(names))
	}

	// The metrics, on the plain listener, agree with inspect, read over
	// HTTPS with the scheduler's certificate.
	schedulerTLS := tlsConfig(t, servingCA, schedulerCert)
	https := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: schedulerTLS}}
	resp, err := https.Get("https://" + listen + extender.Prefix + "/inspect")
	if err != nil {
		t.Fatal(err)
	}
	var inspect extender.InspectResult
	err = json.NewDecoder(resp.Body).Decode(&inspect)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	fams := scrapeMetrics(t, "http://"+metrics+"/metrics")
	cards := 0
	for _, n := range inspect.Nodes {
		for _, card := range n.Cards {
			cards++
			labels := map[string]string{"node": n.Name, "card": strconv.Itoa(card.Index), "uuid": card.UUID, "model": card.Model, "healthy": strconv.FormatBool(card.Healthy)}
			if v, ok := metricValue(fams, extender.CardMemoryMetric, labels); !ok || v != float64(card.Total<<30) {
				t.Errorf("%s%v = %v (present %v), inspect says %d GiB", extender.CardMemoryMetric, labels, v, ok, card.Total)
			}
			if v, ok := metricValue(fams, extender.CardAllocatedMetric, labels); !ok || v != float64(card.Used<<30) {
				t.Errorf("%s%v = %v (present %v), inspect says %d GiB", extender.CardAllocatedMetric, labels, v, ok, card.Used)
			}
		}
	}
	if cards != 3 || len(fams[extender.CardMemoryMetric].GetMetric()) != cards {
		t.Errorf("inspect shows %d cards, /metrics %d; want 3 each", cards, len(fams[extender.CardMemoryMetric].GetMetric()))
	}
	if v, _ := metricValue(fams, "gpushare_extender_binds_total", map[string]string{"result": extender.BindBound}); v != float64(len(names)) {
		t.Errorf("binds bound = %v, want %d", v, len(names))
	}
	if v, _ := metricValue(fams, "gpushare_extender_cache_rebuild_seconds", map[string]string{}); v <= 0 {
		t.Errorf("cache rebuild seconds = %v, want > 0", v)
	}
	// 40 GiB fits no card: the pod waits, and is the only pending one.
	c.createPod(t, util.MakePod("too-big").GPUMem(41).Obj())
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		v, _ := metricValue(scrapeMetrics(t, "http://"+metrics+"/metrics"), "gpushare_extender_pending_pods", map[string]string{})
		return v == 1, nil
	}); err != nil {
		t.Errorf("gpushare_extender_pending_pods never 1 with one unschedulable pod: %v", err)
	}

	// A serving certificate rotated as kubelet updates a Secret volume is
	// served to new connections, without a restart, and pods still bind.
	rotated := servingCA.Server(t)
	certstest.WriteSecretVolume(t, extDir, map[string][]byte{certstest.CertFile: rotated.CertPEM, certstest.KeyFile: rotated.KeyPEM, certstest.CAFile: schedulerCA.PEM})
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return servedSerial(t, listen, schedulerTLS).Cmp(rotated.Serial) == 0, nil
	}); err != nil {
		t.Fatalf("the rotated certificate (serial %v) is not served: %v", rotated.Serial, err)
	}
	c.createPod(t, util.MakePod("after-rotation").GPUMem(2).Obj())
	c.waitBound(t, []string{"after-rotation"}, 30*time.Second)

	// The extender trusts another CA now: the scheduler's certificate is
	// refused, the pod stays pending with the TLS error.
	ext.stop()
	otherDir := t.TempDir()
	certstest.WriteSecretVolume(t, otherDir, map[string][]byte{certstest.CAFile: otherCA.PEM})
	cfg.ClientCAFile = filepath.Join(otherDir, certstest.CAFile)
	refusing := runExtender(t, cfg)
	c.createPod(t, util.MakePod("refused").GPUMem(2).Obj())
	var msg string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := admin.CoreV1().Pods("default").Get(ctx, "refused", metav1.GetOptions{})
		if err != nil || !util.SchedulingFailed(p) {
			return false, nil
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				msg = cond.Message
			}
		}
		return strings.Contains(msg, "tls"), nil
	}); err != nil {
		t.Errorf("the pod did not fail scheduling with a TLS error; last message %q (logs: %s)", msg, cp.LogsDir())
	}
	t.Logf("kube-scheduler: %s", msg)
	if p, err := admin.CoreV1().Pods("default").Get(ctx, "refused", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
		t.Errorf("refused pod: node %q, err %v; want it pending", p.Spec.NodeName, err)
	}
	if !strings.Contains(refusing.logs.String(), "TLS handshake error") {
		t.Errorf("the extender did not log the refused handshake:\n%s", refusing.logs.String())
	}
	if _, ok := metricValue(scrapeMetrics(t, "http://"+metrics+"/metrics"), "gpushare_extender_binds_total", map[string]string{"result": extender.BindBound}); !ok {
		t.Error("the refusing extender's metrics listener serves no binds counter")
	}
}
