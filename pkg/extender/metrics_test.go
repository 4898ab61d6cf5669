package extender

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/test/util"
)

// scrapeHandler GETs /metrics from h and parses the Prometheus text.
func scrapeHandler(t testing.TB, h http.Handler) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", rec.Code)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.Label {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// value returns the counter's or gauge's value of family's series with
// exactly labels.
func value(fams map[string]*dto.MetricFamily, family string, labels map[string]string) (float64, bool) {
	f := fams[family]
	if f == nil {
		return 0, false
	}
	for _, m := range f.Metric {
		if !maps.Equal(labels, labelsOf(m)) {
			continue
		}
		if m.Counter != nil {
			return m.Counter.GetValue(), true
		}
		return m.Gauge.GetValue(), true
	}
	return 0, false
}

// TestCardMetricsAgreeWithInspect: for the same state, every card that GET
// /gpushare-scheduler/inspect shows has exactly one series of each card
// gauge, labelled with its node, index, UUID, model and health, whose
// values are the card's total and used units in bytes (GiB and MiB nodes
// alike); and the binds are counted by result.
func TestCardMetricsAgreeWithInspect(t *testing.T) {
	mib := util.MakeNode("mib").Inventory(&gpushare.Inventory{Unit: gpushare.UnitMiB, Devices: []gpushare.Device{
		{Index: 0, UUID: "GPU-mib-0", Model: "A10", Memory: 24576, Healthy: true}}}).Capacity(24576, 1).Obj()
	f := newFixture(t, mib)
	// One bind that lands (cards assumed then bound), one that conflicts.
	if _, got := f.do(t, "POST", Prefix+"/bind", `{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending","Node":"mixed"}`); got != "{\n  \"Error\": \"\"\n}\n" {
		t.Fatalf("bind = %s", got)
	}
	if _, got := f.do(t, "POST", Prefix+"/bind", `{"PodName":"running","PodNamespace":"default","PodUID":"uid-running","Node":"sick"}`); got == "{\n  \"Error\": \"\"\n}\n" {
		t.Fatal("bind of a pod bound elsewhere succeeded")
	}

	status, body := f.do(t, "GET", Prefix+"/inspect", "")
	if status != http.StatusOK {
		t.Fatalf("inspect = %d", status)
	}
	var inspect InspectResult
	if err := json.Unmarshal([]byte(body), &inspect); err != nil {
		t.Fatal(err)
	}
	fams := scrapeHandler(t, f.handler)
	cards := 0
	for _, n := range inspect.Nodes {
		per := float64(1 << 30)
		if n.Unit == gpushare.UnitMiB {
			per = 1 << 20
		}
		for _, c := range n.Cards {
			cards++
			labels := map[string]string{"node": n.Name, "card": strconv.Itoa(c.Index), "uuid": c.UUID, "model": c.Model, "healthy": strconv.FormatBool(c.Healthy)}
			if v, ok := value(fams, "gpushare_card_memory_bytes", labels); !ok || v != float64(c.Total)*per {
				t.Errorf("gpushare_card_memory_bytes%v = %v (present %v), want %d %s", labels, v, ok, c.Total, n.Unit)
			}
			if v, ok := value(fams, "gpushare_card_memory_allocated_bytes", labels); !ok || v != float64(c.Used)*per {
				t.Errorf("gpushare_card_memory_allocated_bytes%v = %v (present %v), want %d %s", labels, v, ok, c.Used, n.Unit)
			}
		}
	}
	if cards != 5 {
		t.Fatalf("inspect shows %d cards, want 5 (2 mixed, 2 sick, 1 mib)", cards)
	}
	for _, name := range []string{"gpushare_card_memory_bytes", "gpushare_card_memory_allocated_bytes"} {
		if got := len(fams[name].GetMetric()); got != cards {
			t.Errorf("%s has %d series, want one per card (%d)", name, got, cards)
		}
	}
	// The bound pod's 4 GiB went to card 0 of mixed (binpack), beside the
	// running pod's 10.
	if v, _ := value(fams, "gpushare_card_memory_allocated_bytes", map[string]string{"node": "mixed", "card": "0", "uuid": "GPU-mixed-0", "model": "Tesla-T4", "healthy": "true"}); v != 14<<30 {
		t.Errorf("mixed card 0 allocated = %v bytes, want 14 GiB", v)
	}
	for result, want := range map[string]float64{BindBound: 1, BindConflict: 1, BindError: 0, BindUnknown: 0} {
		if v, ok := value(fams, "gpushare_extender_binds_total", map[string]string{"result": result}); !ok || v != want {
			t.Errorf("gpushare_extender_binds_total{result=%q} = %v (present %v), want %v", result, v, ok, want)
		}
	}
}

// TestPendingPods counts the pods without a node that ask gpu-mem and are
// not finished, following binds and deletes.
func TestPendingPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset(
		util.MakePod("gpu").GPUMem(4).Obj(),
		util.MakePod("init-gpu").InitGPUMem(4).Container("app").Obj(),
		util.MakePod("invalid-gpu").GPUMem(0).Obj(),
		util.MakePod("failed").GPUMem(4).Phase(corev1.PodFailed).Obj(),
		util.MakePod("cpu").Container("app").Obj(),
		util.MakePod("bound").GPUMem(4).Node("n1").Obj(),
	)
	factory := informers.NewSharedInformerFactory(client, 0)
	p, err := newPendingPods(factory)
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	wait := func(want int) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); p.Count() != want; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("pending = %d, want %d", p.Count(), want)
			}
		}
	}
	wait(3)
	pod, err := client.CoreV1().Pods("default").Get(ctx, "gpu", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Spec.NodeName = "n1"
	if _, err := client.CoreV1().Pods("default").Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(2)
	if err := client.CoreV1().Pods("default").Delete(ctx, "init-gpu", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait(1)
}

// BenchmarkScrape measures one GET /metrics of an extender holding 5,000
// nodes × 8 cards and 40,000 pods (80,000 card series), as Prometheus
// scrapes it (gzip) and uncompressed.
func BenchmarkScrape(b *testing.B) {
	c, err := cache.New(cache.Config{Policy: allocator.DefaultPolicy, Clock: clocktesting.NewFakeClock(time.Unix(0, 0))})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewSource(1))
	for i := range 5000 {
		name := fmt.Sprintf("node-%05d", i)
		if err := c.SetNode(util.MakeNode(name).Host("96", "512Gi").Cards("V100", 32, 32, 32, 32, 32, 32, 32, 32).Obj()); err != nil {
			b.Fatal(err)
		}
		for j := range 8 {
			units := int64(2 + 2*r.Intn(4))
			idx := r.Intn(8)
			a := &gpushare.Allocation{Node: name, Unit: "GiB", Containers: []gpushare.ContainerAllocation{
				{Name: "c0", Devices: []gpushare.DeviceShare{{Index: idx, UUID: fmt.Sprintf("GPU-%s-%d", name, idx), Units: units}}},
			}}
			c.UpsertPod(util.MakePod(fmt.Sprintf("p-%d-%d", i, j)).GPUMem(units).Allocation(a).Node(name).Obj())
		}
	}
	h := newHandlers(b, ktestingLogger(b), HandlersConfig{Placer: c, Viewer: c, Ready: func() bool { return true }}).Router()
	for _, enc := range []string{"gzip", "identity"} {
		b.Run("encoding="+enc, func(b *testing.B) {
			b.ReportAllocs()
			var size int
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				req.Header.Set("Accept-Encoding", enc)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("GET /metrics = %d", rec.Code)
				}
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size)/(1<<20), "MiB/scrape")
		})
	}
}

// TestCardLinesParse: the card gauges, written by hand, parse as the text
// format with any label value a node name, UUID or model may carry.
func TestCardLinesParse(t *testing.T) {
	views := []inspectapi.Node{{Name: "n1", Unit: gpushare.UnitGiB, Cards: []inspectapi.Card{
		{Index: 0, UUID: "GPU-0", Model: `Tesla "T4" \ 16GB` + "\nnext line", Total: 16, Used: 3, Healthy: true},
		{Index: 11, Model: "", Total: 80, Used: 0},
	}}}
	var b strings.Builder
	w := bufio.NewWriter(&b)
	writeCards(w, views)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(b.String()))
	if err != nil {
		t.Fatalf("parsing:\n%s\n%v", b.String(), err)
	}
	for _, tc := range []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{CardMemoryMetric, map[string]string{"node": "n1", "card": "0", "uuid": "GPU-0", "model": views[0].Cards[0].Model, "healthy": "true"}, 16 << 30},
		{CardAllocatedMetric, map[string]string{"node": "n1", "card": "0", "uuid": "GPU-0", "model": views[0].Cards[0].Model, "healthy": "true"}, 3 << 30},
		{CardMemoryMetric, map[string]string{"node": "n1", "card": "11", "uuid": "", "model": "", "healthy": "false"}, 80 << 30},
	} {
		if v, ok := value(fams, tc.family, tc.labels); !ok || v != tc.want {
			t.Errorf("%s%v = %v (present %v), want %v", tc.family, tc.labels, v, ok, tc.want)
		}
	}
	if got := fams[CardMemoryMetric].GetType(); got != dto.MetricType_GAUGE {
		t.Errorf("type %v, want gauge", got)
	}
}

// TestMetricsGzip: a client that accepts gzip (Prometheus does) gets the
// same metrics compressed.
func TestMetricsGzip(t *testing.T) {
	f := newFixture(t)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	if got := rec.Header().Get("Content-Encoding"); got != "gzip" {
		t.Fatalf("Content-Encoding %q, want gzip", got)
	}
	zr, err := gzip.NewReader(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(zr)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := value(fams, "gpushare_extender_nodes", map[string]string{}); !ok || v != 3 {
		t.Errorf("gpushare_extender_nodes = %v (present %v), want 3", v, ok)
	}
	if n := len(fams[CardMemoryMetric].GetMetric()); n != 4 {
		t.Errorf("%d card series, want 4", n)
	}
	for header, want := range map[string]bool{"gzip": true, "deflate, gzip;q=1.0": true, "gzip;q=0": false, "identity": false, "": false} {
		if got := acceptsGzip(header); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", header, got, want)
		}
	}
}
