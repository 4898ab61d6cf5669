package extender

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/certs"
	"github.com/gpushare/gpushare/pkg/feed"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/leader"
	"github.com/gpushare/gpushare/pkg/preemption"
	"github.com/gpushare/gpushare/pkg/webhook"
)

// watchListGates turns on client-go's WatchListClient. Informers then
// stream their initial lists object by object, instead of decoding one
// response holding every pod of the cluster, which lowers the peak RSS
// (measured: docs/benchmarks.md#what-the-informers-objects-cost).
// client-go falls back to a plain list on API servers without streaming
// lists.
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

// Extender is the scheduler extender a Config describes: the allocation
// cache and the informers that feed it, the verbs' handlers and their
// listeners, and the leadership. New builds it; Run serves it.
type Extender struct {
	cfg    Config
	logger klog.Logger
	// start is when New began; the cache's rebuild is timed from it.
	start  time.Time
	client kubernetes.Interface
	cache  *cache.Cache
	feeder *feed.Feeder
	// informers makes the informers besides the feeder's: the pending pods,
	// the preemptor's budgets and the webhook's quotas. The pending pods'
	// informer is filtered and stripped, so no other pod informer may come
	// from it.
	informers informers.SharedInformerFactory
	pending   *pendingPods
	// preemptor is nil with NoPreemption, and gate for a single replica.
	preemptor *preemption.Preemptor
	gate      *leader.Gate
	handlers  *Handlers
	tls       *tlsFiles
	// endpoints are the listeners, opened by Run.
	endpoints []*endpoint
}

// New builds the extender of cfg, once cfg is valid and its TLS files
// load. Nothing runs, listens or calls the API until Run.
func New(ctx context.Context, cfg Config) (*Extender, error) {
	start := time.Now()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	files, err := loadTLS(cfg)
	if err != nil {
		return nil, err
	}
	enableStreamingLists()
	client, err := NewClient(cfg.Kubeconfig, cfg.QPS, cfg.Burst)
	if err != nil {
		return nil, err
	}
	e := &Extender{cfg: cfg, logger: klog.FromContext(ctx), start: start, client: client, tls: files,
		informers: informers.NewSharedInformerFactory(client, 0)}
	if err := e.buildCache(ctx); err != nil {
		return nil, err
	}
	if err := e.buildVerbs(); err != nil {
		return nil, err
	}
	if err := e.registerMetrics(); err != nil {
		return nil, err
	}
	if err := e.buildEndpoints(); err != nil {
		return nil, err
	}
	return e, nil
}

// buildCache builds the allocation cache, its feeder and the pending pods'
// informer.
func (e *Extender) buildCache(ctx context.Context) error {
	logger := e.logger
	c, err := cache.New(cache.Config{Policy: e.cfg.Policy, AssumeTTL: e.cfg.AssumeTTL, OnIgnored: func(v inspectapi.Ignored) {
		logger.Info("Ignoring a pod's allocation annotation; charging the pod by its request", "pod", klog.KRef(v.Namespace, v.Name), "reason", v.Reason)
	}})
	if err != nil {
		return err
	}
	feeder, err := feed.New(ctx, c, e.client)
	if err != nil {
		return err
	}
	if e.cfg.DRANodeChoice {
		if err := feeder.EnableDRA(cmp.Or(e.cfg.WebhookDRAUnit, gpushare.UnitGiB)); err != nil {
			return err
		}
	}
	e.cache, e.feeder = c, feeder
	e.pending, err = newPendingPods(e.informers)
	return err
}

// buildVerbs builds the leadership gate, the binder, the preemptor and the
// handlers over the cache.
func (e *Extender) buildVerbs() error {
	cfg := e.cfg
	hcfg := HandlersConfig{Placer: e.cache, Viewer: e.cache, Ready: e.feeder.Synced, FilterAll: cfg.FilterAll}
	bcfg := BinderConfig{Cache: e.cache, API: ClientPodAPI{Client: e.client}, Pods: e.feeder}
	pcfg := preemption.Config{Cache: e.cache, API: preemption.ClientAPI{Client: e.client}, Pods: e.feeder, Nodes: e.feeder,
		TTL: cfg.AssumeTTL, PercentageOfNodesToScore: cfg.PercentageOfNodesToScore}
	if cfg.DRANodeChoice {
		hcfg.Claims = e.feeder
	}
	if cfg.LeaderElect || cfg.FollowSchedulerLease != "" {
		e.gate = leader.NewGate(e.feeder.CatchUp, cfg.Election.RenewDeadline, cfg.LeaderElect, nil)
		hcfg.Leader, bcfg.Fence, pcfg.Fence = e.gate, e.gate, e.gate
	}
	if !cfg.NoPreemption {
		pcfg.Budgets = e.informers.Policy().V1().PodDisruptionBudgets()
		p, err := preemption.New(e.logger.WithName("preempt"), pcfg)
		if err != nil {
			return err
		}
		e.preemptor, hcfg.Preempt = p, p
	}
	var err error
	if hcfg.Binder, err = NewBinder(bcfg); err != nil {
		return err
	}
	e.handlers, err = NewHandlers(e.logger, hcfg)
	return err
}

// registerMetrics adds the metrics of the preemptor, the pending pods, the
// TLS files and the leadership to those the handlers serve.
func (e *Extender) registerMetrics() error {
	reg := e.handlers.Registerer()
	if e.preemptor != nil {
		if err := e.preemptor.Register(reg); err != nil {
			return err
		}
	}
	if err := e.pending.register(reg); err != nil {
		return err
	}
	if err := e.tls.register(reg); err != nil {
		return err
	}
	if e.gate == nil {
		return nil
	}
	gate := e.gate
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
	return nil
}

// buildEndpoints builds the listeners: the API on Config.Listen, HTTPS
// with Config.TLSCertFile. When they are set, it also builds the probes
// and metrics on Config.MetricsListen, and the webhook on
// Config.WebhookListen.
func (e *Extender) buildEndpoints() error {
	cfg, files := e.cfg, e.tls
	e.endpoints = []*endpoint{{name: "extender", addr: cfg.Listen, handler: e.handlers.Router()}}
	if files.api != nil {
		e.endpoints[0].tls = certs.ServerConfig(files.api, files.clientCAs)
	}
	if cfg.MetricsListen != "" {
		e.endpoints = append(e.endpoints, &endpoint{name: "metrics", addr: cfg.MetricsListen, handler: withProfiling(e.handlers.ProbeRouter(), cfg.Profiling)})
	}
	if cfg.WebhookListen != "" {
		wh, err := e.webhook()
		if err != nil {
			return err
		}
		e.endpoints = append(e.endpoints, &endpoint{name: "webhook", addr: cfg.WebhookListen, handler: wh, tls: certs.ServerConfig(files.webhook, nil)})
	}
	return nil
}

// webhook builds the mutating webhook. It converts pods to claim pods when
// Config.WebhookDRANodeSelector says so.
func (e *Extender) webhook() (http.Handler, error) {
	wh, err := webhook.New(e.logger.WithName("webhook"), e.cfg.SchedulerName, e.handlers.Registerer())
	if err != nil {
		return nil, err
	}
	if e.cfg.WebhookDRANodeSelector != "" {
		d, err := e.cfg.draConversion(e.client, webhook.NewInformerQuotas(e.informers))
		if err != nil {
			return nil, err
		}
		if err := wh.EnableDRA(d); err != nil {
			return nil, err
		}
	}
	mux := http.NewServeMux()
	mux.Handle(webhook.Path, wh)
	return mux, nil
}

// Run serves the extender until ctx ends; call it once. It listens at
// once, so that liveness probes pass, and starts the informers. It reports
// ready on /readyz once they have synced. Then it runs the leadership, if
// any.
func (e *Extender) Run(ctx context.Context) error {
	// Everything Run starts (informers, file watches) stops when it returns.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	logger := klog.FromContext(ctx)
	if err := listenAll(e.endpoints); err != nil {
		return err
	}
	serveErr := make(chan error, len(e.endpoints)+1) // each listener, and the leadership
	e.serve(ctx, serveErr)
	logger.Info("Scheduler extender started", "policy", e.cfg.Policy, "filterBest", !e.cfg.FilterAll, "preemption", !e.cfg.NoPreemption, "draNodeChoice", e.cfg.DRANodeChoice)
	e.tls.watch(ctx, e.cfg.CertCheckPeriod)

	e.feeder.Start(ctx)
	e.informers.Start(ctx.Done())
	if e.preemptor != nil {
		e.preemptor.Start(ctx)
	}
	// synced ends when the informers have synced and the leadership, if
	// any, has stopped. Run waits for it, so that a stopping leader
	// releases its Lease before the process exits.
	synced := make(chan struct{})
	go func() {
		defer close(synced)
		e.lead(ctx, serveErr)
	}()

	var runErr error
	select {
	case runErr = <-serveErr:
	case <-ctx.Done():
	}
	runErr = cmp.Or(runErr, e.shutdown(ctx))
	cancel()
	<-synced
	if runErr == nil {
		logger.Info("Stopped")
	}
	return runErr
}

// serve serves each endpoint's listener. A failure goes to errs.
func (e *Extender) serve(ctx context.Context, errs chan<- error) {
	logger := klog.FromContext(ctx)
	for _, ep := range e.endpoints {
		ep.srv = newServer(ctx, ep.handler, e.cfg.Timeouts)
		ep.srv.ErrorLog = log.New(serverLog{logger.WithValues("listener", ep.name)}, "", 0)
		go func() {
			if err := ep.srv.Serve(ep.ln); !errors.Is(err, http.ErrServerClosed) {
				errs <- fmt.Errorf("serving the %s listener on %s: %w", ep.name, ep.addr, err)
			}
		}()
		logger.Info("Serving", "listener", ep.name, "address", ep.ln.Addr().String(), "https", ep.tls != nil,
			"clientCertificates", ep.tls != nil && ep.tls.ClientAuth == tls.RequireAndVerifyClientCert)
	}
}

// lead waits for the informers' sync, then runs the leadership, if any,
// until ctx ends. Its failure goes to errs. Only a synced replica stands
// for leader.
func (e *Extender) lead(ctx context.Context, errs chan<- error) {
	if !e.feeder.WaitForSync(ctx) {
		return
	}
	e.handlers.CacheRebuilt(time.Since(e.start))
	// The initial lists (full objects, before stripping) are garbage
	// now. An idle extender would hold that memory until the next
	// periodic GC, so hand it back to the OS at once.
	debug.FreeOSMemory()
	nodes, pods := e.cache.Counts()
	klog.FromContext(ctx).Info("Informer caches synced; ready", "nodes", nodes, "pods", pods, "rebuild", time.Since(e.start))
	if err := e.runLeadership(ctx); err != nil {
		errs <- err
	}
}

// shutdown stops the listeners, waiting up to 10 s for their requests. It
// returns the first failure.
func (e *Extender) shutdown(ctx context.Context) error {
	ctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer stop()
	var first error
	for _, ep := range e.endpoints {
		if err := ep.srv.Shutdown(ctx); err != nil {
			first = cmp.Or(first, fmt.Errorf("shutting down the %s listener: %w", ep.name, err))
		}
	}
	return first
}

// runLeadership runs the election or follows the scheduler's Lease, as
// Config says, until ctx ends. It does nothing for a single replica.
func (e *Extender) runLeadership(ctx context.Context) error {
	cfg := e.cfg
	switch {
	case cfg.LeaderElect:
		return leader.Elect(ctx, e.client, cfg.Election, e.gate)
	case cfg.FollowSchedulerLease != "":
		ns, name, err := cfg.followed()
		if err != nil {
			return err
		}
		return leader.Follow(ctx, e.client, leader.FollowConfig{Namespace: ns, Name: name, Identity: cfg.Election.Identity}, e.gate)
	}
	return nil
}
