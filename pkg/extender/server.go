package extender

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"time"

	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/kubeclient"
)

// Config is the extender's configuration, as set by its flags.
type Config struct {
	// Kubeconfig path; empty for in-cluster configuration.
	Kubeconfig string
	// Listen is the HTTP listen address, e.g. ":39999".
	Listen string
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
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if _, err := allocator.New(c.Policy, nil, nil); err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	if c.QPS <= 0 || c.Burst <= 0 {
		return fmt.Errorf("--kube-api-qps (%v) and --kube-api-burst (%d) must be positive", c.QPS, c.Burst)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("--listen %q: %w", c.Listen, err)
	}
	return nil
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

// Run serves the extender until ctx ends. It listens at once (so liveness
// probes pass) and reports ready on /readyz once the informers have synced.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx)
	enableStreamingLists()
	client, err := NewClient(cfg.Kubeconfig, cfg.QPS, cfg.Burst)
	if err != nil {
		return err
	}
	c, err := cache.New(cache.Config{Policy: cfg.Policy, AssumeTTL: cfg.AssumeTTL, OnIgnored: func(v cache.IgnoredView) {
		logger.Info("Ignoring a pod's allocation annotation; charging the pod by its request", "pod", klog.KRef(v.Namespace, v.Name), "reason", v.Reason)
	}})
	if err != nil {
		return err
	}
	feeder, err := cache.NewFeeder(ctx, c, client)
	if err != nil {
		return err
	}
	binder := NewBinder(c, ClientPodAPI{Client: client}, feeder, nil)
	h := NewHandlers(logger, c, binder, feeder.Synced)
	h.FilterAll = cfg.FilterAll

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listening on %s (is another extender running?): %w", cfg.Listen, err)
	}
	srv := &http.Server{Handler: h.Router(), ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	logger.Info("Serving the scheduler extender", "address", ln.Addr().String(), "policy", cfg.Policy, "filterBest", !cfg.FilterAll)

	feeder.Start(ctx)
	go func() {
		if feeder.WaitForSync(ctx) {
			// The initial lists (full objects, before stripping) are
			// garbage now; an idle extender would hold that memory until
			// the next periodic GC, so hand it back to the OS at once.
			debug.FreeOSMemory()
			nodes, pods := c.Counts()
			logger.Info("Informer caches synced; ready", "nodes", nodes, "pods", pods)
		}
	}()

	select {
	case err := <-serveErr:
		return fmt.Errorf("serving on %s: %w", cfg.Listen, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("shutting down: %w", err)
	}
	logger.Info("Stopped")
	return nil
}
