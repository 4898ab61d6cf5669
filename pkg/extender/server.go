package extender

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/certs"
	"github.com/gpushare/gpushare/pkg/feed"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/kubeclient"
	"github.com/gpushare/gpushare/pkg/leader"
	"github.com/gpushare/gpushare/pkg/webhook"
)

// DefaultListen is the default listen address: loopback, for a
// kube-scheduler on the same host (a static pod, or the sidecar topology).
// The verbs can bind any pending GPU pod and inspect shows every GPU pod,
// so exposing them beyond the host is the operator's explicit choice.
const DefaultListen = "127.0.0.1:39999"

// Config is the extender's configuration, as set by its flags.
type Config struct {
	// Kubeconfig path; empty for in-cluster configuration.
	Kubeconfig string
	// Listen is the listen address of the extender API, e.g.
	// "127.0.0.1:39999".
	Listen string
	// TLSCertFile and TLSKeyFile, when set (both), serve Listen over HTTPS
	// with this certificate, reloaded when the files change.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile, when set (with TLS), makes Listen require a client
	// certificate signed by one of its CAs (kube-scheduler's); reloaded
	// when it changes. Needs MetricsListen: kubelet's probes and Prometheus
	// present no client certificate.
	ClientCAFile string
	// MetricsListen, when set, serves /healthz, /readyz, /version and
	// /metrics there too, over plain HTTP (see Handlers.ProbeRouter).
	MetricsListen string
	// Profiling serves Go's profiles (net/http/pprof) at /debug/pprof/ on
	// MetricsListen: CPU, heap and goroutines of a running extender. Off by
	// default; needs MetricsListen (never the extender API's listener).
	Profiling bool
	// WebhookListen, when set, serves the mutating webhook (pkg/webhook)
	// there over HTTPS with WebhookTLSCertFile and WebhookTLSKeyFile,
	// reloaded when they change.
	WebhookListen                         string
	WebhookTLSCertFile, WebhookTLSKeyFile string
	// SchedulerName is what the webhook sets spec.schedulerName to.
	SchedulerName string
	// WebhookDRANodeSelector, KEY=VALUE[,KEY=VALUE...] (the labels of the
	// gpushare DRA driver's nodes), turns on the webhook's conversion of
	// pods that select every one of them (spec.nodeSelector, or every term
	// of their required node affinity) into claim pods (webhook.DRA);
	// empty: off.
	WebhookDRANodeSelector string
	// WebhookDRAUnit is aliyun.com/gpu-mem's unit for that conversion:
	// GiB or MiB; with DRANodeChoice, also the unit the DRA nodes' memory
	// is counted in ("": GiB).
	WebhookDRAUnit string
	// DRANodeChoice: filter rates the nodes of pods asking the marker
	// gpushare.io/dra-claim (claim pods of the gpushare DRA driver) from
	// the driver's ResourceSlices and the allocated ResourceClaims, which
	// the extender then watches; the webhook's conversion adds the marker.
	DRANodeChoice bool
	// CertCheckPeriod is how often the TLS files are stat'ed besides the
	// fsnotify events (certs.DefaultCheckPeriod when zero).
	CertCheckPeriod time.Duration
	// Policy is the default scoring policy.
	Policy string
	// QPS and Burst of the API client: a bind makes one call (the Binding),
	// more on a conflict or an informer miss.
	QPS   float32
	Burst int
	// AssumeTTL bounds how long cards stay held for a bind that never completed.
	AssumeTTL time.Duration
	// FilterAll: filter passes every node that fits, not only the
	// best-scoring ones (see Handlers.FilterAll); --filter-best=false.
	FilterAll bool
	// PercentageOfNodesToScore is kube-scheduler's (0 to 100, 0 its
	// adaptive default): a preemption reads from it whether kube-scheduler
	// may have stopped filtering before it found every node that fits.
	PercentageOfNodesToScore int32
	// NoPreemption: never evict pods for a pod of higher priority
	// (--preemption=false); the preempt verb then lets kube-scheduler
	// evict nobody for a GPU pod either.
	NoPreemption bool
	// Timeouts of the HTTP server; zero fields take DefaultTimeouts'.
	Timeouts Timeouts

	// LeaderElect: standalone replicas behind one Service elect a leader
	// with the Lease Election names; only the leader is ready and answers
	// the verbs (pkg/leader).
	LeaderElect bool
	// FollowSchedulerLease, "namespace/name": a sidecar serves only while
	// the kube-scheduler beside it (Election.Identity, its pod name) holds
	// this Lease, after a catch-up (pkg/leader).
	FollowSchedulerLease string
	// Election: the Lease, this replica's identity and the durations; with
	// FollowSchedulerLease only Identity and RenewDeadline are read.
	Election leader.ElectConfig
}

// Timeouts bound how long a client may take over a request and hold an
// idle connection (net/http.Server's fields of the same names).
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultTimeouts: a whole request (4 MiB at most) is read within 30 s; an
// answer is written within the bind's deadline and a margin; an idle
// keep-alive connection is closed after two minutes.
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: BindTimeout + 15*time.Second, Idle: 2 * time.Minute}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if _, err := allocator.New(c.Policy, nil, nil); err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	if c.QPS <= 0 || c.Burst <= 0 {
		return fmt.Errorf("--kube-api-qps (%v) and --kube-api-burst (%d) must be positive", c.QPS, c.Burst)
	}
	var errs []error
	addrs := map[string]string{} // address -> flag
	for _, a := range []struct{ flag, addr string }{{"--listen", c.Listen}, {"--metrics-listen", c.MetricsListen}, {"--webhook-listen", c.WebhookListen}} {
		if a.addr == "" && a.flag != "--listen" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", a.flag, a.addr, err))
		} else if other, dup := addrs[a.addr]; dup {
			errs = append(errs, fmt.Errorf("%s and %s are both %q; give each its own port", other, a.flag, a.addr))
		}
		addrs[a.addr] = a.flag
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file go together"))
	}
	if c.ClientCAFile != "" && c.TLSCertFile == "" {
		errs = append(errs, errors.New("--client-ca-file needs --tls-cert-file and --tls-key-file: client certificates are checked over HTTPS"))
	}
	if c.Profiling && c.MetricsListen == "" {
		errs = append(errs, errors.New("--profiling needs --metrics-listen: the profiles are served there only, never on the extender API's listener"))
	}
	if c.ClientCAFile != "" && c.MetricsListen == "" {
		errs = append(errs, errors.New("--client-ca-file needs --metrics-listen: kubelet's probes and Prometheus present no client certificate, so /healthz, /readyz and /metrics must be served on a plain listener too"))
	}
	switch {
	case c.WebhookListen != "" && (c.WebhookTLSCertFile == "" || c.WebhookTLSKeyFile == ""):
		errs = append(errs, errors.New("--webhook-listen needs --webhook-tls-cert-file and --webhook-tls-key-file: the API server calls webhooks over HTTPS only"))
	case c.WebhookListen == "" && (c.WebhookTLSCertFile != "" || c.WebhookTLSKeyFile != ""):
		errs = append(errs, errors.New("--webhook-tls-cert-file and --webhook-tls-key-file need --webhook-listen"))
	}
	switch {
	case c.LeaderElect && c.FollowSchedulerLease != "":
		errs = append(errs, errors.New("--leader-elect and --follow-scheduler-lease exclude each other: the first is for standalone replicas behind a Service, the second for a sidecar of kube-scheduler"))
	case c.LeaderElect:
		if err := c.Election.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--leader-elect: %w", err))
		}
	case c.FollowSchedulerLease != "":
		if _, _, err := c.followed(); err != nil {
			errs = append(errs, err)
		}
		if c.Election.Identity == "" || c.Election.RenewDeadline <= 0 {
			errs = append(errs, fmt.Errorf("--follow-scheduler-lease needs --leader-elect-identity (the pod name, %q) and a positive --leader-elect-renew-deadline (%s)", c.Election.Identity, c.Election.RenewDeadline))
		}
	}
	if c.WebhookListen != "" {
		if err := webhook.ValidSchedulerName(c.SchedulerName); err != nil {
			errs = append(errs, fmt.Errorf("--scheduler-name: %w", err))
		}
	}
	if u := c.WebhookDRAUnit; c.DRANodeChoice && u != "" && u != gpushare.UnitGiB && u != gpushare.UnitMiB {
		errs = append(errs, fmt.Errorf("--webhook-dra-memory-unit %q: want %s or %s", u, gpushare.UnitGiB, gpushare.UnitMiB))
	}
	if c.WebhookDRANodeSelector != "" {
		if c.WebhookListen == "" {
			errs = append(errs, errors.New("--webhook-dra-node-selector needs --webhook-listen"))
		}
		if _, err := c.draConversion(nil, webhook.InformerQuotas{}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// draConversion is the webhook's DRA setting from WebhookDRANodeSelector
// and WebhookDRAUnit, its templates made through client, the namespaces'
// ResourceQuotas read from quotas.
func (c *Config) draConversion(client kubernetes.Interface, quotas webhook.Quotas) (webhook.DRA, error) {
	labels := map[string]string{}
	for _, pair := range strings.Split(c.WebhookDRANodeSelector, ",") {
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return webhook.DRA{}, fmt.Errorf("--webhook-dra-node-selector %q: want KEY=VALUE[,KEY=VALUE...], e.g. gpushare.io/device-mode=dra; %q has no =", c.WebhookDRANodeSelector, pair)
		}
		if _, dup := labels[key]; dup {
			return webhook.DRA{}, fmt.Errorf("--webhook-dra-node-selector %q: label %s given twice", c.WebhookDRANodeSelector, key)
		}
		labels[key] = value
	}
	d := webhook.DRA{NodeSelector: labels, Unit: c.WebhookDRAUnit, NodeChoice: c.DRANodeChoice, Templates: webhook.ClientTemplates{Client: client}, Quotas: quotas}
	if err := d.Validate(); err != nil {
		return webhook.DRA{}, fmt.Errorf("--webhook-dra-node-selector/--webhook-dra-memory-unit: %w", err)
	}
	return d, nil
}

// followed splits FollowSchedulerLease into the Lease's namespace and name.
func (c *Config) followed() (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(c.FollowSchedulerLease, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--follow-scheduler-lease %q: want namespace/name, e.g. kube-system/kube-scheduler", c.FollowSchedulerLease)
	}
	return namespace, name, nil
}

// NewClient builds the extender's API client from a kubeconfig path ("" for in-cluster).
func NewClient(kubeconfig string, qps float32, burst int) (kubernetes.Interface, error) {
	return kubeclient.New(kubeconfig, qps, burst, "gpushare-scheduler-extender")
}

// watchListGates turns on client-go's WatchListClient: informers then
// stream their initial lists object by object instead of decoding one
// response holding every pod of the cluster. Measured with 5,000 nodes and
// 40,000 pods, peak RSS falls from 521 to 166 MiB. client-go falls back to
// a plain list on API servers without streaming lists.
type watchListGates struct{ clientfeatures.Gates }

func (g watchListGates) Enabled(f clientfeatures.Feature) bool {
	return f == clientfeatures.WatchListClient || g.Gates.Enabled(f)
}

// enableStreamingLists installs watchListGates unless the operator chose
// with KUBE_FEATURE_WatchListClient.
func enableStreamingLists() {
	if _, set := os.LookupEnv("KUBE_FEATURE_" + string(clientfeatures.WatchListClient)); !set {
		clientfeatures.ReplaceFeatureGates(watchListGates{clientfeatures.FeatureGates()})
	}
}

// newServer returns an HTTP server of handler with the timeouts t (zero
// fields from DefaultTimeouts), whose requests' contexts derive from ctx.
func newServer(ctx context.Context, handler http.Handler, t Timeouts) *http.Server {
	def := DefaultTimeouts
	return &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cmp.Or(t.ReadHeader, def.ReadHeader),
		ReadTimeout:       cmp.Or(t.Read, def.Read),
		WriteTimeout:      cmp.Or(t.Write, def.Write),
		IdleTimeout:       cmp.Or(t.Idle, def.Idle),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
}

// Run serves the extender until ctx ends. It listens at once (so liveness
// probes pass) and reports ready on /readyz once the informers have synced.
// Besides the API on cfg.Listen (HTTPS with cfg.TLSCertFile) it serves the
// probes and metrics on cfg.MetricsListen and the webhook on
// cfg.WebhookListen when they are set.
func Run(ctx context.Context, cfg Config) error {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Everything Run starts (informers, file watches) stops when it returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logger := klog.FromContext(ctx)
	files, err := loadTLS(cfg)
	if err != nil {
		return err
	}
	enableStreamingLists()
	client, err := NewClient(cfg.Kubeconfig, cfg.QPS, cfg.Burst)
	if err != nil {
		return err
	}
	c, err := cache.New(cache.Config{Policy: cfg.Policy, AssumeTTL: cfg.AssumeTTL, OnIgnored: func(v inspectapi.Ignored) {
		logger.Info("Ignoring a pod's allocation annotation; charging the pod by its request", "pod", klog.KRef(v.Namespace, v.Name), "reason", v.Reason)
	}})
	if err != nil {
		return err
	}
	feeder, err := feed.New(ctx, c, client)
	if err != nil {
		return err
	}
	binder := NewBinder(c, ClientPodAPI{Client: client}, feeder, nil)
	h := NewHandlers(logger, c, binder, feeder.Synced)
	h.FilterAll = cfg.FilterAll
	if cfg.DRANodeChoice {
		if err := feeder.EnableDRA(cmp.Or(cfg.WebhookDRAUnit, gpushare.UnitGiB)); err != nil {
			return err
		}
		h.Claims = feeder
	}
	var gate *leader.Gate
	var fence Fencer
	if cfg.LeaderElect || cfg.FollowSchedulerLease != "" {
		gate = leader.NewGate(feeder.CatchUp, cfg.Election.RenewDeadline, cfg.LeaderElect, nil)
		h.Leader, binder.Fence, fence = gate, gate, gate
	}
	var preemptor *Preemptor
	if !cfg.NoPreemption {
		preemptor, err = NewPreemptor(logger.WithName("preempt"), PreemptorConfig{
			Cache: c, API: ClientPreemptAPI{Client: client}, Pods: feeder, Nodes: feeder, Client: client,
			TTL: cfg.AssumeTTL, Fence: fence, PercentageOfNodesToScore: cfg.PercentageOfNodesToScore,
		})
		if err != nil {
			return err
		}
		h.Preempt = preemptor
	}
	pending := newPendingPods(client)
	reg := h.Registerer()
	if preemptor != nil {
		if err := preemptor.Register(reg); err != nil {
			return err
		}
	}
	if err := pending.register(reg); err != nil {
		return err
	}
	if err := files.register(reg); err != nil {
		return err
	}
	if gate != nil {
		if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "leader",
			Help: "1 while this replica leads and has caught up with the API (it answers the verbs), else 0.",
		}, func() float64 {
			if gate.Serving() {
				return 1
			}
			return 0
		})); err != nil {
			return fmt.Errorf("registering the leader gauge: %w", err)
		}
	}

	apiHandler := h.Router()
	eps := []*endpoint{{name: "extender", addr: cfg.Listen, handler: apiHandler}}
	if files.api != nil {
		eps[0].tls = certs.ServerConfig(files.api, files.clientCAs)
	}
	if cfg.MetricsListen != "" {
		eps = append(eps, &endpoint{name: "metrics", addr: cfg.MetricsListen, handler: withProfiling(h.ProbeRouter(), cfg.Profiling)})
	}
	if cfg.WebhookListen != "" {
		wh, err := webhook.New(logger.WithName("webhook"), cfg.SchedulerName, reg)
		if err != nil {
			return err
		}
		if cfg.WebhookDRANodeSelector != "" {
			// The conversion reads ResourceQuotas from an informer of its
			// own, which stops with ctx.
			factory := informers.NewSharedInformerFactory(client, 0)
			d, err := cfg.draConversion(client, webhook.NewInformerQuotas(factory))
			if err != nil {
				return err
			}
			if err := wh.EnableDRA(d); err != nil {
				return err
			}
			factory.Start(ctx.Done())
		}
		mux := http.NewServeMux()
		mux.Handle(webhook.Path, wh)
		eps = append(eps, &endpoint{name: "webhook", addr: cfg.WebhookListen, handler: mux, tls: certs.ServerConfig(files.webhook, nil)})
	}
	if err := listenAll(eps); err != nil {
		return err
	}
	serveErr := make(chan error, len(eps)+1) // each listener, and the leadership
	for _, ep := range eps {
		ep.srv = newServer(ctx, ep.handler, cfg.Timeouts)
		ep.srv.ErrorLog = log.New(serverLog{logger.WithValues("listener", ep.name)}, "", 0)
		go func() {
			if err := ep.srv.Serve(ep.ln); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- fmt.Errorf("serving the %s listener on %s: %w", ep.name, ep.addr, err)
			}
		}()
		logger.Info("Serving", "listener", ep.name, "address", ep.ln.Addr().String(), "https", ep.tls != nil,
			"clientCertificates", ep.tls != nil && ep.tls.ClientAuth == tls.RequireAndVerifyClientCert)
	}
	logger.Info("Scheduler extender started", "policy", cfg.Policy, "filterBest", !cfg.FilterAll, "preemption", !cfg.NoPreemption, "draNodeChoice", cfg.DRANodeChoice)
	files.watch(ctx, cfg.CertCheckPeriod)

	feeder.Start(ctx)
	pending.Start(ctx)
	if preemptor != nil {
		preemptor.Start(ctx)
	}
	// synced ends when the informers have synced and the leadership (if
	// any) has stopped: Run waits for it, so a stopping leader releases
	// its Lease before the process exits.
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		if feeder.WaitForSync(ctx) {
			h.CacheRebuilt(time.Since(start))
			// The initial lists (full objects, before stripping) are
			// garbage now; an idle extender would hold that memory until
			// the next periodic GC, so hand it back to the OS at once.
			debug.FreeOSMemory()
			nodes, pods := c.Counts()
			logger.Info("Informer caches synced; ready", "nodes", nodes, "pods", pods, "rebuild", time.Since(start))
			// Only a synced replica stands for leader.
			if err := runLeadership(ctx, cfg, client, gate); err != nil {
				serveErr <- err
			}
		}
	}()

	var runErr error
	select {
	case runErr = <-serveErr:
	case <-ctx.Done():
	}
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer stop()
	for _, ep := range eps {
		if err := ep.srv.Shutdown(shutdownCtx); err != nil {
			runErr = cmp.Or(runErr, fmt.Errorf("shutting down the %s listener: %w", ep.name, err))
		}
	}
	cancel()
	<-synced
	if runErr == nil {
		logger.Info("Stopped")
	}
	return runErr
}

// runLeadership runs the election or follows the scheduler's Lease, as cfg
// says, until ctx ends; nothing for a single replica.
func runLeadership(ctx context.Context, cfg Config, client kubernetes.Interface, gate *leader.Gate) error {
	switch {
	case cfg.LeaderElect:
		return leader.Elect(ctx, client, cfg.Election, gate)
	case cfg.FollowSchedulerLease != "":
		ns, name, err := cfg.followed()
		if err != nil {
			return err
		}
		return leader.Follow(ctx, client, leader.FollowConfig{Namespace: ns, Name: name, Identity: cfg.Election.Identity}, gate)
	}
	return nil
}

// endpoint is one of the extender's listeners.
type endpoint struct {
	name, addr string
	handler    http.Handler
	// tls, when set, makes the listener HTTPS.
	tls *tls.Config
	ln  net.Listener
	srv *http.Server
}

// listenAll opens every endpoint's listener, or none: on an error the ones
// opened are closed.
func listenAll(eps []*endpoint) error {
	for i, ep := range eps {
		ln, err := net.Listen("tcp", ep.addr)
		if err != nil {
			for _, done := range eps[:i] {
				_ = done.ln.Close()
			}
			return fmt.Errorf("listening on %s for the %s listener (is another extender running?): %w", ep.addr, ep.name, err)
		}
		if ep.tls != nil {
			ln = tls.NewListener(ln, ep.tls)
		}
		ep.ln = ln
	}
	return nil
}

// serverLog passes net/http's error log (failed TLS handshakes among it:
// a client certificate refused, a client that does not trust ours) to a
// structured logger.
type serverLog struct{ logger klog.Logger }

func (s serverLog) Write(p []byte) (int, error) {
	s.logger.Error(errors.New(strings.TrimSpace(string(p))), "HTTP server error")
	return len(p), nil
}

// tlsFiles are the certificates the extender serves and the client CAs it
// trusts, each reloaded when its files change; nil when not configured.
type tlsFiles struct {
	api       *certs.KeyPair
	clientCAs *certs.CAPool
	webhook   *certs.KeyPair
}

// loadTLS reads the TLS files cfg names.
func loadTLS(cfg Config) (*tlsFiles, error) {
	var f tlsFiles
	var err error
	if cfg.TLSCertFile != "" {
		if f.api, err = certs.LoadKeyPair(cfg.TLSCertFile, cfg.TLSKeyFile); err != nil {
			return nil, fmt.Errorf("--tls-cert-file, --tls-key-file: %w", err)
		}
	}
	if cfg.ClientCAFile != "" {
		if f.clientCAs, err = certs.LoadCAPool(cfg.ClientCAFile); err != nil {
			return nil, fmt.Errorf("--client-ca-file: %w", err)
		}
	}
	if cfg.WebhookListen != "" {
		if f.webhook, err = certs.LoadKeyPair(cfg.WebhookTLSCertFile, cfg.WebhookTLSKeyFile); err != nil {
			return nil, fmt.Errorf("--webhook-tls-cert-file, --webhook-tls-key-file: %w", err)
		}
	}
	return &f, nil
}

// watch reloads every file when it changes, until ctx ends.
func (f *tlsFiles) watch(ctx context.Context, period time.Duration) {
	named := func(name string) context.Context {
		return klog.NewContext(ctx, klog.FromContext(ctx).WithValues("listener", name))
	}
	if f.api != nil {
		go f.api.Run(named("extender"), period)
	}
	if f.clientCAs != nil {
		go f.clientCAs.Run(named("extender"), period)
	}
	if f.webhook != nil {
		go f.webhook.Run(named("webhook"), period)
	}
}

// register adds, for each listener with a certificate, its expiry and the
// reloads refused.
func (f *tlsFiles) register(reg prometheus.Registerer) error {
	add := func(listener, file string, kp *certs.KeyPair, failures func() int64) error {
		labels := prometheus.Labels{"listener": listener, "file": file}
		cs := []prometheus.Collector{prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "tls_reload_failures_total", ConstLabels: labels,
			Help: "New TLS files that did not load (the previous ones are kept), by listener and file (keypair, client-ca).",
		}, func() float64 { return float64(failures()) })}
		if kp != nil {
			cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Namespace: "gpushare", Subsystem: "extender", Name: "tls_certificate_expiry_timestamp_seconds", ConstLabels: prometheus.Labels{"listener": listener},
				Help: "When the certificate a listener serves expires, Unix seconds.",
			}, func() float64 { return float64(kp.Leaf().NotAfter.Unix()) }))
		}
		for _, c := range cs {
			if err := reg.Register(c); err != nil {
				return fmt.Errorf("registering the TLS metrics: %w", err)
			}
		}
		return nil
	}
	var errs []error
	if f.api != nil {
		errs = append(errs, add("extender", "keypair", f.api, f.api.Failures))
	}
	if f.clientCAs != nil {
		errs = append(errs, add("extender", "client-ca", nil, f.clientCAs.Failures))
	}
	if f.webhook != nil {
		errs = append(errs, add("webhook", "keypair", f.webhook, f.webhook.Failures))
	}
	return errors.Join(errs...)
}

// withProfiling serves next, and Go's profiles at /debug/pprof/ when on.
func withProfiling(next http.Handler, on bool) http.Handler {
	if !on {
		return next
	}
	mux := http.NewServeMux()
	mux.Handle("/", next)
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}
