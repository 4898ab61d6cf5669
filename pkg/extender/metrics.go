package extender

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
}

func newMetrics(nodesAndPods func() (int, int)) *metrics {
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
	}
	m.registry.MustRegister(m.latency, m.rejected,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "nodes",
			Help: "Nodes in the allocation cache.",
		}, func() float64 { n, _ := nodesAndPods(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "pods",
			Help: "Pods holding GPU memory in the allocation cache (assumed or bound).",
		}, func() float64 { _, p := nodesAndPods(); return float64(p) }),
	)
	return m
}
