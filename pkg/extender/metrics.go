package extender

import (
	"bufio"
	"compress/gzip"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
)

// Bind results: the values of the label result of
// gpushare_extender_binds_total.
const (
	// BindBound: the pod is bound to the node. A retried bind of a pod
	// already there counts too.
	BindBound = "bound"
	// BindConflict: the pod was bound elsewhere, re-created or deleted, or
	// still held by an earlier bind; or the Binding kept conflicting.
	BindConflict = "conflict"
	// BindError: refused for any other reason (no fit, a bad request, the
	// API refused the Binding). The cards were released.
	BindError = "error"
	// BindUnknown: a Binding may have been made, and the pod could not be
	// read back. The cards stay held.
	BindUnknown = "unknown"
)

// metrics are served on /metrics.
type metrics struct {
	registry *prometheus.Registry
	// latency: verb (filter, prioritize, bind) and result (ok, error) ->
	// handler seconds.
	latency *prometheus.HistogramVec
	// rejected: route -> requests answered 503 because too many were
	// being served.
	rejected *prometheus.CounterVec
	// binds: result (Bind*) -> binds answered.
	binds *prometheus.CounterVec
	// rebuild: seconds from start until the informers' initial lists were in
	// the cache; 0 until then.
	rebuild prometheus.Gauge
}

func newMetrics(c Viewer) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "gpushare",
			Subsystem: "extender",
			Name:      "request_duration_seconds",
			Help:      "Time to answer a scheduler extender request, by verb and result.",
			Buckets:   prometheus.ExponentialBuckets(0.0001, 2, 16), // 100µs .. ~3.3s
		}, []string{"verb", "result"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpushare",
			Subsystem: "extender",
			Name:      "requests_rejected_total",
			Help:      "Requests answered 503 because too many were being served at once, by route.",
		}, []string{"route"}),
		binds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpushare",
			Subsystem: "extender",
			Name:      "binds_total",
			Help:      "Bind requests answered, by result: bound, conflict (bound elsewhere, re-created, or an earlier bind in flight), error (refused; cards released) or unknown (a Binding may exist; cards held).",
		}, []string{"result"}),
		rebuild: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "gpushare",
			Subsystem: "extender",
			Name:      "cache_rebuild_seconds",
			Help:      "Seconds from the extender's start until the informers had synced and the cache held every node and pod; 0 until then.",
		}),
	}
	// Every series exists from the start, so that rates and dashboards
	// see zeros rather than nothing.
	for _, verb := range []string{"filter", "prioritize", "bind"} {
		m.latency.WithLabelValues(verb, "ok")
		m.latency.WithLabelValues(verb, "error")
		m.rejected.WithLabelValues(verb)
	}
	m.rejected.WithLabelValues("inspect")
	m.rejected.WithLabelValues("metrics")
	for _, r := range []string{BindBound, BindConflict, BindError, BindUnknown} {
		m.binds.WithLabelValues(r)
	}
	m.registry.MustRegister(m.latency, m.rejected, m.binds, m.rebuild,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "nodes",
			Help: "Nodes in the allocation cache.",
		}, func() float64 { n, _ := c.Counts(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "pods",
			Help: "Pods holding GPU memory in the allocation cache (assumed or bound).",
		}, func() float64 { _, p := c.Counts(); return float64(p) }),
	)
	return m
}

// The card gauges: per card, its memory and what pods hold of it, in
// bytes (the node's unit, GiB or MiB, times its size). They are labelled
// with the node, the card's index, UUID and model, and whether it is
// healthy.
const (
	CardMemoryMetric    = "gpushare_card_memory_bytes"
	CardAllocatedMetric = "gpushare_card_memory_allocated_bytes"
)

var cardFamilies = []struct {
	name, help string
	value      func(c *inspectapi.Card) int64
}{
	{CardMemoryMetric, "Memory of a GPU card as the extender counts it (whole units of its node's unit), in bytes.",
		func(c *inspectapi.Card) int64 { return c.Total }},
	{CardAllocatedMetric, "GPU memory held on a card by pods (assumed or bound), in bytes; may exceed the card's memory when a node shrank under running pods.",
		func(c *inspectapi.Card) int64 { return c.Used }},
}

// serveMetrics answers GET /metrics in the Prometheus text format: the
// registry's metrics, then the card gauges. It reads the gauges from the
// cache at scrape time, with one Inspect that holds the cache's lock only
// while it copies. It writes them directly: at 5,000 nodes × 8 cards they
// are 80,000 series, and client_golang const metrics cost many times more
// a scrape (measured: docs/reference/metrics.md, "Scrape cost"). The
// answer is compressed with gzip when the client accepts it, as
// Prometheus does.
func (m *metrics) serveMetrics(c Viewer, w http.ResponseWriter, r *http.Request) {
	fams, err := m.registry.Gather()
	if err != nil {
		http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
		return
	}
	views, _ := c.Inspect("")
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	var out io.Writer = w
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		gz, _ := gzip.NewWriterLevel(w, gzip.BestSpeed) // a valid level: no error
		defer func() { _ = gz.Close() }()
		out = gz
	}
	bw := bufio.NewWriterSize(out, 64<<10)
	defer func() { _ = bw.Flush() }()
	for _, f := range fams {
		if _, err := expfmt.MetricFamilyToText(bw, f); err != nil {
			return // the client went away
		}
	}
	writeCards(bw, views)
}

// writeCards writes the card gauges of views in the text format.
func writeCards(w *bufio.Writer, views []inspectapi.Node) {
	buf := make([]byte, 0, 256)
	for _, fam := range cardFamilies {
		buf = append(buf[:0], "# HELP "...)
		buf = append(buf, fam.name...)
		buf = append(buf, ' ')
		buf = appendEscaped(buf, fam.help, false)
		buf = append(buf, "\n# TYPE "...)
		buf = append(buf, fam.name...)
		buf = append(buf, " gauge\n"...)
		_, _ = w.Write(buf)
		for i := range views {
			n := &views[i]
			per := unitBytes(n.Unit)
			for j := range n.Cards {
				card := &n.Cards[j]
				buf = append(buf[:0], fam.name...)
				buf = append(buf, `{node="`...)
				buf = appendEscaped(buf, n.Name, true)
				buf = append(buf, `",card="`...)
				buf = strconv.AppendInt(buf, int64(card.Index), 10)
				buf = append(buf, `",uuid="`...)
				buf = appendEscaped(buf, card.UUID, true)
				buf = append(buf, `",model="`...)
				buf = appendEscaped(buf, card.Model, true)
				buf = append(buf, `",healthy="`...)
				buf = strconv.AppendBool(buf, card.Healthy)
				buf = append(buf, `"} `...)
				buf = strconv.AppendFloat(buf, float64(fam.value(card))*per, 'g', -1, 64)
				buf = append(buf, '\n')
				_, _ = w.Write(buf)
			}
		}
	}
}

// appendEscaped appends s escaped as the text format wants: backslash and
// newline always, and the double quote in label values.
func appendEscaped(buf []byte, s string, label bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			buf = append(buf, `\\`...)
		case c == '\n':
			buf = append(buf, `\n`...)
		case c == '"' && label:
			buf = append(buf, `\"`...)
		default:
			buf = append(buf, c)
		}
	}
	return buf
}

// acceptsGzip reports whether an Accept-Encoding header allows gzip.
func acceptsGzip(header string) bool {
	for _, part := range strings.Split(header, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.TrimSpace(enc) == "gzip" {
			return strings.ReplaceAll(strings.TrimSpace(params), " ", "") != "q=0"
		}
	}
	return false
}

// unitBytes is the size of one unit in bytes: 2^20 for MiB, else 2^30
// for GiB, the default unit.
func unitBytes(unit string) float64 {
	if unit == gpushare.UnitMiB {
		return 1 << 20
	}
	return 1 << 30
}
