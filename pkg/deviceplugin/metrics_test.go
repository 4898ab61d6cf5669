package deviceplugin

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/util"
)

// scrape GETs url and parses the Prometheus text it answers.
func scrape(t *testing.T, get func() (*http.Response, error)) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := get()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	var p expfmt.TextParser
	families, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return families
}

// sample returns the value of family's series whose labels are exactly
// labels; ok is false when there is none.
func sample(families map[string]*dto.MetricFamily, family string, labels map[string]string) (v float64, ok bool) {
	f := families[family]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if !maps.Equal(labels, got) {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		}
	}
	return 0, false
}

type stubHandoff struct {
	a   *handoff.Assignment
	err error
}

func (s stubHandoff) Prefer(context.Context, []string, []string, int) ([]string, error) {
	return nil, nil
}
func (s stubHandoff) Allocate(context.Context, []string) (*handoff.Assignment, error) {
	if s.a == nil && s.err == nil {
		panic("a bug")
	}
	return s.a, s.err
}
func (stubHandoff) Revoke(context.Context, *handoff.Assignment) {}

type stubPodAPI struct {
	handoff.PodAPI
	err error
}

func (s stubPodAPI) PatchPodAnnotations(context.Context, string, string, types.UID, map[string]*string) error {
	return s.err
}

// TestMetricsHooks: each hook counts what it wraps: Allocate outcomes (a
// panic counts as failed), patches that rewrite the allocation annotation,
// health changes per card and direction, and NVML errors with the time of
// the last one.
func TestMetricsHooks(t *testing.T) {
	cards := []Card{{Card: gpushare.Card{Index: 0, UUID: "GPU-a", Model: "T4"}, Units: 16}, {Card: gpushare.Card{Index: 1, UUID: "GPU-b", Model: "T4"}, Units: 16}}
	m := NewMetrics(cards)
	m.now = func() time.Time { return time.Unix(1700000000, 0) }
	ctx := context.Background()

	for _, h := range []stubHandoff{{a: &handoff.Assignment{}}, {a: &handoff.Assignment{}}, {a: &handoff.Assignment{Relocated: true}}, {err: handoff.ErrNoMatch}, {}} {
		func() {
			defer func() { _ = recover() }()
			_, _ = m.Handoff(h).Allocate(ctx, nil)
		}()
	}
	alloc, assigned := "{}", "true"
	_ = m.PodAPI(stubPodAPI{}).PatchPodAnnotations(ctx, "default", "p", "u", map[string]*string{gpushare.AnnotationAllocation: &alloc})
	_ = m.PodAPI(stubPodAPI{}).PatchPodAnnotations(ctx, "default", "p", "u", map[string]*string{gpushare.AnnotationAssigned: &assigned})
	_ = m.PodAPI(stubPodAPI{err: errors.New("refused")}).PatchPodAnnotations(ctx, "default", "p", "u", map[string]*string{gpushare.AnnotationAllocation: &alloc})

	m.SetHealth(map[string]bool{"GPU-a": true})
	m.SetHealth(map[string]bool{"GPU-a": true}) // no change
	m.SetHealth(nil)
	m.SetHealth(map[string]bool{"GPU-b": true})

	f := gpu.NewFake([]gpu.Device{{Card: gpushare.Card{Index: 0, UUID: "GPU-a"}}, {Card: gpushare.Card{Index: 1, UUID: "GPU-b"}}})
	f.SetProbeError("GPU-a", errors.New("gone"))
	g := m.GPUs(f)
	_ = g.Probe("GPU-a")
	_ = g.Probe("GPU-b")
	watchCtx, stop := context.WithCancel(ctx)
	out := make(chan gpu.Event)
	watched := make(chan error, 1)
	go func() { watched <- g.WatchXIDs(watchCtx, out) }()
	f.InjectXID("", 0)       // a failed wait
	f.InjectXID("", 79)      // a card NVML could not name
	f.InjectXID("GPU-a", 79) // a plain XID: no NVML error
	for range 3 {
		<-out
	}
	stop()
	if err := <-watched; err != nil {
		t.Fatal(err)
	}

	fams := scrape(t, func() (*http.Response, error) {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		return rec.Result(), nil
	})
	for _, tc := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"gpushare_deviceplugin_allocations_total", map[string]string{"outcome": "matched"}, 2},
		{"gpushare_deviceplugin_allocations_total", map[string]string{"outcome": "relocated"}, 1},
		{"gpushare_deviceplugin_allocations_total", map[string]string{"outcome": "failed"}, 2},
		{"gpushare_deviceplugin_annotation_repairs_total", nil, 1},
		{"gpushare_deviceplugin_health_transitions_total", map[string]string{"card": "0", "uuid": "GPU-a", "to": "unhealthy"}, 1},
		{"gpushare_deviceplugin_health_transitions_total", map[string]string{"card": "0", "uuid": "GPU-a", "to": "healthy"}, 1},
		{"gpushare_deviceplugin_health_transitions_total", map[string]string{"card": "1", "uuid": "GPU-b", "to": "unhealthy"}, 1},
		{"gpushare_deviceplugin_health_transitions_total", map[string]string{"card": "1", "uuid": "GPU-b", "to": "healthy"}, 0},
		{"gpushare_deviceplugin_card_healthy", map[string]string{"card": "0", "uuid": "GPU-a", "model": "T4"}, 1},
		{"gpushare_deviceplugin_card_healthy", map[string]string{"card": "1", "uuid": "GPU-b", "model": "T4"}, 0},
		{"gpushare_deviceplugin_nvml_errors_total", map[string]string{"op": "probe"}, 1},
		{"gpushare_deviceplugin_nvml_errors_total", map[string]string{"op": "wait"}, 1},
		{"gpushare_deviceplugin_nvml_errors_total", map[string]string{"op": "uuid"}, 1},
		{"gpushare_deviceplugin_nvml_errors_total", map[string]string{"op": "watch"}, 0},
		{"gpushare_deviceplugin_nvml_last_error_timestamp_seconds", nil, 1700000000},
	} {
		if got, ok := sample(fams, tc.family, tc.labels); !ok || got != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.family, tc.labels, got, ok, tc.want)
		}
	}
}

// TestRunServesMetrics: the plugin started with --metrics-listen serves
// /healthz and /metrics over HTTP, and an XID that marks a card unhealthy,
// a failed recovery probe and the recovery show there.
func TestRunServesMetrics(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	devs, err := gpu.ParseFakeGPUs("2xTesla-T4:16GiB", "n1")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // Run listens on it again
	fakeGPUs := gpu.NewFake(devs)
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- runPlugin(ctx, Config{NodeName: "n1", Unit: gpushare.UnitGiB, DeviceListStrategy: StrategyEnvvar, KubeletDir: t.TempDir(),
			Client: fake.NewClientset(util.MakeNode("n1").Obj()), GPUs: fakeGPUs, HealthCheck: true, RecoveryWindow: 100 * time.Millisecond,
			MetricsListen: addr, OnReady: func(*handoff.Handoff) { close(ready) }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run ended before serving: %v", err)
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("GET /healthz = %s %q", resp.Status, body)
	}
	get := func() (*http.Response, error) { return http.Get("http://" + addr + "/metrics") }
	card0 := map[string]string{"card": "0", "uuid": devs[0].UUID, "model": devs[0].Model}
	if v, ok := sample(scrape(t, get), "gpushare_deviceplugin_card_healthy", card0); !ok || v != 1 {
		t.Fatalf("card 0 healthy = %v (present %v), want 1", v, ok)
	}

	fakeGPUs.SetProbeError(devs[0].UUID, errors.New("card lost"))
	fakeGPUs.InjectXID(devs[0].UUID, 79)
	transitions := func(to string) float64 {
		v, _ := sample(scrape(t, get), "gpushare_deviceplugin_health_transitions_total", map[string]string{"card": "0", "uuid": devs[0].UUID, "to": to})
		return v
	}
	waitFor(t, "card 0 to go unhealthy", func() bool { return transitions("unhealthy") == 1 })
	waitFor(t, "a failed probe to be counted", func() bool {
		v, _ := sample(scrape(t, get), "gpushare_deviceplugin_nvml_errors_total", map[string]string{"op": "probe"})
		return v >= 1
	})
	if v, _ := sample(scrape(t, get), "gpushare_deviceplugin_card_healthy", card0); v != 0 {
		t.Errorf("card 0 healthy = %v while unhealthy, want 0", v)
	}
	fakeGPUs.SetProbeError(devs[0].UUID, nil)
	waitFor(t, "card 0 to recover", func() bool { return transitions("healthy") == 1 })
	if v, _ := sample(scrape(t, get), "gpushare_deviceplugin_card_healthy", card0); v != 1 {
		t.Errorf("card 0 healthy = %v after recovery, want 1", v)
	}
}

// TestRunFollowsFakeControlWithMetrics: the metrics hooks wrap the GPUs,
// yet a plugin on fake GPUs still follows its control file (the demo and
// the end-to-end tests inject XIDs through it).
func TestRunFollowsFakeControlWithMetrics(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	control := filepath.Join(t.TempDir(), "control")
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		done <- runPlugin(ctx, Config{NodeName: "n1", Unit: gpushare.UnitGiB, DeviceListStrategy: StrategyEnvvar, KubeletDir: t.TempDir(),
			Client: fake.NewClientset(util.MakeNode("n1").Obj()), FakeGPUs: "2xTesla-T4:16GiB", FakeControl: control, HealthCheck: true,
			OnReady: func(*handoff.Handoff) { close(ready) }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run ended before serving: %v", err)
	}
	if err := os.WriteFile(control, []byte("xid 0 79\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitForWithin(t, 5*time.Second, "the control file to be applied (removed)", func() bool {
		_, err := os.Stat(control)
		return errors.Is(err, os.ErrNotExist)
	})
}

func waitForWithin(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
	}
}
