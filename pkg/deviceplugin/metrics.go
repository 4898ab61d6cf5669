package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
)

// Allocation outcomes, the values of
// gpushare_deviceplugin_allocations_total's label outcome (one per
// container kubelet asked for).
const (
	// OutcomeMatched: the container runs on the cards its annotation names.
	OutcomeMatched = "matched"
	// OutcomeRelocated: kubelet's free devices put it on other cards; the
	// annotation is repaired.
	OutcomeRelocated = "relocated"
	// OutcomeFailed: refused (FailedPrecondition) or the call panicked;
	// kubelet fails the pod's admission.
	OutcomeFailed = "failed"
)

// NVML operations whose errors are counted, the values of
// gpushare_deviceplugin_nvml_errors_total's label op.
const (
	// nvmlProbe: the recovery check of an unhealthy card.
	nvmlProbe = "probe"
	// nvmlWatch: the XID event watch stopped; health is no longer watched.
	nvmlWatch = "watch"
	// nvmlWait: waiting for XID events failed (counted against every card).
	nvmlWait = "wait"
	// nvmlUUID: an XID event whose card NVML could not name.
	nvmlUUID = "uuid"
)

// metricsTimeouts bound the metrics server's clients.
const (
	metricsReadTimeout = 10 * time.Second
	metricsIdleTimeout = 2 * time.Minute
)

// Metrics are the device plugin's Prometheus metrics. Its hooks wrap the
// plugin's seams (the handoff, the pod API, the GPUs) and its health
// updates, so the parts they wrap know nothing of them. The error
// messages of NVML are logged, not put in labels: the label values are
// the bounded sets above.
type Metrics struct {
	registry *prometheus.Registry
	// allocations: outcome -> containers.
	allocations *prometheus.CounterVec
	// repairs: allocation annotations rewritten.
	repairs prometheus.Counter
	// transitions: card index, UUID, to (healthy, unhealthy) -> changes.
	transitions *prometheus.CounterVec
	// healthy: card index, UUID, model -> 1 healthy, 0 not.
	healthy *prometheus.GaugeVec
	// nvmlErrors: op -> errors; nvmlLast: when the last one happened.
	nvmlErrors *prometheus.CounterVec
	nvmlLast   prometheus.Gauge
	// mpsRestarts: card index, UUID -> crashed MPS daemons restarted.
	mpsRestarts *prometheus.CounterVec

	cards map[string]Card // UUID -> card; immutable
	now   func() time.Time

	mu sync.Mutex
	// unhealthy: UUIDs of the cards reported unhealthy last.
	unhealthy map[string]bool
}

// NewMetrics returns the metrics of a plugin serving cards, all healthy.
func NewMetrics(cards []Card) *Metrics {
	const ns, sub = "gpushare", "deviceplugin"
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "allocations_total",
			Help: "Containers kubelet asked devices for (Allocate), by outcome: matched (the cards the annotation names), relocated (other cards; the annotation is repaired) or failed (admission refused)."},
			[]string{"outcome"}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "annotation_repairs_total",
			Help: "Pod allocation annotations rewritten to the cards kubelet gave (patches of " + gpushare.AnnotationAllocation + " written)."}),
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "health_transitions_total",
			Help: "Changes of a card's health, by card index, UUID and the state it went to (healthy, unhealthy)."},
			[]string{"card", "uuid", "to"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "card_healthy",
			Help: "1 while a card is advertised healthy, 0 while unhealthy (a critical XID, not recovered yet)."},
			[]string{"card", "uuid", "model"}),
		nvmlErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "nvml_errors_total",
			Help: "NVML errors, by operation: probe (a recovery check), watch (the XID watch stopped), wait (waiting for XID events failed), uuid (an XID event on a card NVML could not name). The messages are in the log."},
			[]string{"op"}),
		nvmlLast: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "nvml_last_error_timestamp_seconds",
			Help: "When the last NVML error happened, Unix seconds; 0 if none since start."}),
		mpsRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "mps_daemon_restarts_total",
			Help: "MPS control daemons that exited on their own and were restarted (--isolation mps), by card index and UUID."},
			[]string{"card", "uuid"}),
		cards:     map[string]Card{},
		now:       time.Now,
		unhealthy: map[string]bool{},
	}
	for _, o := range []string{OutcomeMatched, OutcomeRelocated, OutcomeFailed} {
		m.allocations.WithLabelValues(o)
	}
	for _, op := range []string{nvmlProbe, nvmlWatch, nvmlWait, nvmlUUID} {
		m.nvmlErrors.WithLabelValues(op)
	}
	for _, c := range cards {
		m.cards[c.UUID] = c
		idx := strconv.Itoa(c.Index)
		m.healthy.WithLabelValues(idx, c.UUID, c.Model).Set(1)
		m.transitions.WithLabelValues(idx, c.UUID, "healthy")
		m.transitions.WithLabelValues(idx, c.UUID, "unhealthy")
	}
	m.registry.MustRegister(m.allocations, m.repairs, m.transitions, m.healthy, m.nvmlErrors, m.nvmlLast, m.mpsRestarts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// MPSRestarted counts a restart of the MPS daemon of the card with uuid.
func (m *Metrics) MPSRestarted(uuid string) {
	c := m.cards[uuid]
	m.mpsRestarts.WithLabelValues(strconv.Itoa(c.Index), uuid).Inc()
}

// Handler serves GET /metrics and /healthz (the process is up).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	return mux
}

// Serve listens on addr and serves Handler until ctx ends or stop is
// called; stop waits for the server to end. An empty addr serves nothing.
func (m *Metrics) Serve(ctx context.Context, addr string) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening on %s for metrics: %w", addr, err)
	}
	logger := klog.FromContext(ctx)
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: metricsReadTimeout, ReadTimeout: metricsReadTimeout,
		WriteTimeout: metricsReadTimeout, IdleTimeout: metricsIdleTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Serving metrics failed", "address", addr)
		}
	}()
	logger.Info("Serving metrics and /healthz", "address", ln.Addr().String())
	stopCtx, cancel := context.WithCancel(ctx)
	go func() {
		<-stopCtx.Done()
		_ = srv.Close()
	}()
	return func() { cancel(); <-done }, nil
}

// Handoff returns h counting each Allocate's outcome.
func (m *Metrics) Handoff(h Handoffer) Handoffer { return meteredHandoff{Handoffer: h, m: m} }

type meteredHandoff struct {
	Handoffer
	m *Metrics
}

func (h meteredHandoff) Allocate(ctx context.Context, ids []string) (*handoff.Assignment, error) {
	outcome := OutcomeFailed // also when Allocate panics
	defer func() { h.m.allocations.WithLabelValues(outcome).Inc() }()
	a, err := h.Handoffer.Allocate(ctx, ids)
	switch {
	case err != nil:
	case a.Relocated:
		outcome = OutcomeRelocated
	default:
		outcome = OutcomeMatched
	}
	return a, err
}

// PodAPI returns api counting the patches that rewrite a pod's allocation
// annotation.
func (m *Metrics) PodAPI(api handoff.PodAPI) handoff.PodAPI { return meteredPodAPI{PodAPI: api, m: m} }

type meteredPodAPI struct {
	handoff.PodAPI
	m *Metrics
}

func (a meteredPodAPI) PatchPodAnnotations(ctx context.Context, namespace, name string, uid types.UID, set map[string]*string) error {
	err := a.PodAPI.PatchPodAnnotations(ctx, namespace, name, uid, set)
	if _, ok := set[gpushare.AnnotationAllocation]; ok && err == nil {
		a.m.repairs.Inc()
	}
	return err
}

// GPUs returns g counting its NVML errors.
func (m *Metrics) GPUs(g GPUs) GPUs { return meteredGPUs{GPUs: g, m: m} }

type meteredGPUs struct {
	GPUs
	m *Metrics
}

func (g meteredGPUs) Probe(uuid string) error {
	err := g.GPUs.Probe(uuid)
	if err != nil {
		g.m.nvmlError(nvmlProbe)
	}
	return err
}

// WatchXIDs passes the events on, counting those that report an NVML
// failure (no card named), and counts the watch ending in error.
func (g meteredGPUs) WatchXIDs(ctx context.Context, out chan<- gpu.Event) error {
	in := make(chan gpu.Event)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range in {
			switch {
			case e.UUID == "" && e.XID == 0:
				g.m.nvmlError(nvmlWait)
			case e.UUID == "":
				g.m.nvmlError(nvmlUUID)
			}
			select {
			case out <- e:
			case <-ctx.Done():
			}
		}
	}()
	err := g.GPUs.WatchXIDs(ctx, in)
	close(in) // the watch sends nothing more once it has returned
	<-done
	if err != nil {
		g.m.nvmlError(nvmlWatch)
	}
	return err
}

func (m *Metrics) nvmlError(op string) {
	m.nvmlErrors.WithLabelValues(op).Inc()
	m.nvmlLast.Set(float64(m.now().UnixNano()) / 1e9)
}

// SetHealth records the cards now unhealthy (UUIDs): each card whose
// health changed since the last call counts one transition.
func (m *Metrics) SetHealth(unhealthy map[string]bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for uuid, c := range m.cards {
		was, is := m.unhealthy[uuid], unhealthy[uuid]
		if was == is {
			continue
		}
		idx := strconv.Itoa(c.Index)
		to, v := "healthy", 1.0
		if is {
			to, v = "unhealthy", 0
		}
		m.transitions.WithLabelValues(idx, uuid, to).Inc()
		m.healthy.WithLabelValues(idx, uuid, c.Model).Set(v)
	}
	m.unhealthy = make(map[string]bool, len(unhealthy))
	for u, bad := range unhealthy {
		m.unhealthy[u] = bad
	}
}
