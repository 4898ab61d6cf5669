package extender

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/extenderwire"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/pkg/preemption"
	"github.com/gpushare/gpushare/pkg/version"
)

// Prefix is the path prefix of the extender verbs: the urlPrefix's path in
// the scheduler configuration.
const Prefix = "/gpushare-scheduler"

// MaxBodyBytes caps a request body (extenderwire.MaxBodyBytes).
const MaxBodyBytes = extenderwire.MaxBodyBytes

// DefaultMaxInFlight bounds the filter and prioritize requests served at
// once, and separately the binds. kube-scheduler sends filter and
// prioritize one pod at a time and binds in parallel, each bind a few API
// round trips. More than this at once is a flood. Binds waiting on a slow
// API server hold their own slots, never those of filter and prioritize.
// maxInspectInFlight bounds inspect requests and scrapes of /metrics,
// which walk every node.
const (
	DefaultMaxInFlight = 64
	maxInspectInFlight = 4
)

// DefaultVerbTimeout is the deadline of one filter or prioritize request.
// Past it the request stops and answers an error, before kube-scheduler
// gives up (its httpTimeout, 2 s in the shipped configuration). It also
// stops as soon as kube-scheduler gives up. Each request's searches share
// one step budget too (allocator.DefaultRequestSteps), which usually ends
// it far sooner.
const DefaultVerbTimeout = 1500 * time.Millisecond

// slotWait is how long a request waits for a free slot before it is
// answered 503 with Retry-After.
const slotWait = time.Second

// Placer is what filter and prioritize ask of the allocation cache.
type Placer interface {
	// Filter returns the nodes where pod fits, and why the others fail.
	Filter(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (fit []string, failed map[string]string, err error)
	// FilterBest returns the nodes that fit and score highest.
	FilterBest(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (best []string, failed map[string]string, err error)
	// Score rates each node 0 to 10 for pod's GPU memory.
	Score(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) ([]int64, error)
	// ScoreCPU rates each node for a pod that asks no GPU memory.
	ScoreCPU(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) ([]int64, error)
}

// Viewer is what inspect and /metrics read of the allocation cache.
type Viewer interface {
	// Inspect returns the view of node only, or of every node for "".
	Inspect(only string) (views []inspectapi.Node, ok bool)
	// DefaultPolicy is the scoring policy of pods that name none.
	DefaultPolicy() string
	// Counts returns the nodes and the pods holding GPU memory.
	Counts() (nodes, pods int)
}

var (
	_ Placer    = (*cache.Cache)(nil)
	_ Viewer    = (*cache.Cache)(nil)
	_ Preempter = (*preemption.Preemptor)(nil)
)

// Preempter starts preemptions for GPU pods that fit no node
// (preemption.Preemptor).
type Preempter interface {
	// Unschedulable is filter's call for a pod that fit none of nodes.
	Unschedulable(ctx context.Context, pod *kubeinfo.PodInfo, spec *corev1.Pod, nodes []string)
	// Preempt answers the preempt verb. candidates maps each node to the UIDs
	// of kube-scheduler's victims there.
	Preempt(ctx context.Context, pod *kubeinfo.PodInfo, candidates map[string][]string) map[string]*extenderv1.MetaVictims
}

// Leadership says whether this replica may place pods (leader.Gate).
type Leadership interface {
	// Serving: the replica leads and has caught up with the API.
	Serving() bool
	// Ready is what /readyz reports besides the informers' sync.
	Ready() bool
}

// HandlersConfig builds Handlers.
type HandlersConfig struct {
	// Placer rates the nodes (filter, prioritize), and Viewer shows the cards
	// (inspect, /metrics). Both are the allocation cache.
	Placer Placer
	Viewer Viewer
	// Binder serves bind; nil only where no bind is served.
	Binder *Binder
	// Ready reports whether the cache has been rebuilt from the
	// informers' initial lists.
	Ready func() bool
	// FilterAll: filter passes every node where the pod fits, and the
	// scheduler adds prioritize's scores to its own. When false, the default,
	// filter passes only the nodes prioritize would rate highest
	// (Cache.FilterBest).
	FilterAll bool
	// MaxInFlight bounds the filter and prioritize requests served at once,
	// and the binds, each kind apart. 0 means DefaultMaxInFlight.
	MaxInFlight int
	// VerbTimeout is the deadline of a filter or prioritize request. 0 means
	// DefaultVerbTimeout.
	VerbTimeout time.Duration
	// Leader, when set, decides whether this replica answers the verbs and
	// reports ready; several replicas set it (pkg/leader). With nil, a single
	// replica always does.
	Leader Leadership
	// Preempt, when set, evicts lower-priority pods of one card for a pod that
	// fits no node. With nil, the preempt verb lets kube-scheduler evict nobody
	// for a GPU pod.
	Preempt Preempter
	// Claims, when set (--dra-node-choice), lets filter rate the nodes of pods
	// asking gpushare.io/dra-claim (filterDRA). With nil, filter passes them
	// every node.
	Claims ClaimSource
}

// Validate reports what is missing or out of range.
func (c *HandlersConfig) Validate() error {
	var errs []error
	if c.Placer == nil || c.Viewer == nil || c.Ready == nil {
		errs = append(errs, errors.New("handlers: the placer, the viewer and the ready check are all needed"))
	}
	if c.MaxInFlight < 0 {
		errs = append(errs, fmt.Errorf("max in flight %d: want 0 (for %d) or more", c.MaxInFlight, DefaultMaxInFlight))
	}
	if c.VerbTimeout < 0 {
		errs = append(errs, fmt.Errorf("verb timeout %s: want a positive duration (or zero for %s)", c.VerbTimeout, DefaultVerbTimeout))
	}
	return errors.Join(errs...)
}

// Handlers serves the extender API.
type Handlers struct {
	// cfg is the configuration, defaults filled in.
	cfg HandlersConfig
	// verbSlots (filter and prioritize), bindSlots and inspectSlots hold one
	// token per request being served. inspectSlots bounds inspect and
	// /metrics, both of which walk every node.
	verbSlots, bindSlots, inspectSlots chan struct{}
	// searchSlots bounds, to half the cores, the filter and prioritize
	// requests running at once whose pod's cards need a search
	// (allocator.Searches). However many such requests come, the pods that
	// need none keep the other half.
	searchSlots chan struct{}

	metrics *metrics
	logger  klog.Logger
}

// NewHandlers returns the handlers of cfg.
func NewHandlers(logger klog.Logger, cfg HandlersConfig) (*Handlers, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.MaxInFlight = cmp.Or(cfg.MaxInFlight, DefaultMaxInFlight)
	cfg.VerbTimeout = cmp.Or(cfg.VerbTimeout, DefaultVerbTimeout)
	return &Handlers{cfg: cfg, metrics: newMetrics(cfg.Viewer), logger: logger,
		verbSlots:    make(chan struct{}, cfg.MaxInFlight),
		bindSlots:    make(chan struct{}, cfg.MaxInFlight),
		inspectSlots: make(chan struct{}, maxInspectInFlight),
		searchSlots:  make(chan struct{}, max(1, runtime.GOMAXPROCS(0)/2)),
	}, nil
}

// Router returns the routes.
func (h *Handlers) Router() http.Handler {
	r := httprouter.New()
	r.POST(Prefix+"/filter", h.leading(h.limit(h.verbSlots, "filter", h.filter)))
	r.POST(Prefix+"/prioritize", h.leading(h.limit(h.verbSlots, "prioritize", h.prioritize)))
	r.POST(Prefix+"/bind", h.leading(h.limit(h.bindSlots, "bind", h.bind)))
	r.POST(Prefix+"/preempt", h.leading(h.limit(h.verbSlots, "preempt", h.preempt)))
	r.GET(Prefix+"/inspect", h.limit(h.inspectSlots, "inspect", h.inspect))
	r.GET(Prefix+"/inspect/:node", h.limit(h.inspectSlots, "inspect", h.inspect))
	h.probeRoutes(r)
	return r
}

// ProbeRouter returns the routes for kubelet's probes and Prometheus
// alone: /healthz, /readyz, /version and /metrics, which reveal no pod.
// Run serves them on Config.MetricsListen, over plain HTTP.
func (h *Handlers) ProbeRouter() http.Handler {
	r := httprouter.New()
	h.probeRoutes(r)
	return r
}

func (h *Handlers) probeRoutes(r *httprouter.Router) {
	r.GET("/healthz", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) { _, _ = w.Write([]byte("ok")) })
	r.GET("/readyz", h.readyz)
	r.GET("/version", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
		writeJSON(w, http.StatusOK, map[string]string{"version": version.Version})
	})
	r.GET("/metrics", h.limit(h.inspectSlots, "metrics", func(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
		h.metrics.serveMetrics(h.cfg.Viewer, w, r)
	}))
}

// Registerer is where the extender's other parts (the pending-pods gauge,
// the TLS files, the webhook) register their metrics, served on /metrics.
func (h *Handlers) Registerer() prometheus.Registerer { return h.metrics.registry }

// CacheRebuilt records how long the cache took to rebuild from the
// informers' initial lists.
func (h *Handlers) CacheRebuilt(d time.Duration) { h.metrics.rebuild.Set(d.Seconds()) }

// limit serves next while it holds a token of slots. When none frees up
// within slotWait, it answers 503 with Retry-After. kube-scheduler takes
// any answer but 200 as a failed call and retries the pod later.
func (h *Handlers) limit(slots chan struct{}, route string, next httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		t := time.NewTimer(slotWait)
		defer t.Stop()
		select {
		case slots <- struct{}{}:
		case <-t.C:
			h.metrics.rejected.WithLabelValues(route).Inc()
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{
				"error": fmt.Sprintf("gpushare extender is serving %d %s requests at once; retry later", cap(slots), route)})
			return
		case <-r.Context().Done():
			return
		}
		defer func() { <-slots }()
		next(w, r, ps)
	}
}

// leading answers 503 with Retry-After when this replica does not serve:
// it is not the leader, or still catching up. kube-scheduler reports an
// extender error and retries the pod with backoff. By then the Service
// routes to the leader, or the sidecar's own scheduler has lost the lead.
func (h *Handlers) leading(next httprouter.Handle) httprouter.Handle {
	return func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		if h.cfg.Leader != nil && !h.cfg.Leader.Serving() {
			w.Header().Set("Retry-After", "1")
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": errNotLeader.Error()})
			return
		}
		next(w, r, ps)
	}
}

// searching runs fn holding a search slot when pod's cards need a search
// (allocator.Searches), else at once. It fails, naming the pod, when ctx
// ends first.
func (h *Handlers) searching(ctx context.Context, pod *kubeinfo.PodInfo, fn func() error) error {
	if pod.Demand == nil || !allocator.Searches(pod.Demand) {
		return fn()
	}
	select {
	case h.searchSlots <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("pod %s/%s waited for one of the %d slots of pods whose cards need a search: %w", pod.Namespace, pod.Name, cap(h.searchSlots), context.Cause(ctx))
	}
	defer func() { <-h.searchSlots }()
	return fn()
}

// errNotLeader answers the verbs on a replica that is not serving.
var errNotLeader = errors.New("gpushare extender replica is not the leader (or is catching up with the API); the scheduler will retry")

// inFlight returns the verb requests being served: filter and
// prioritize, and binds.
func (h *Handlers) inFlight() int { return len(h.verbSlots) + len(h.bindSlots) }

// verbContext returns the context of a filter or prioritize request. It
// ends at the request's deadline (VerbTimeout), or when kube-scheduler
// gives up and the connection closes. Its logger names the verb.
func (h *Handlers) verbContext(r *http.Request, verb string) (context.Context, context.CancelFunc) {
	timeout := h.cfg.VerbTimeout
	ctx, cancel := context.WithTimeoutCause(r.Context(), timeout,
		fmt.Errorf("the extender's %s deadline (%s) passed", verb, timeout))
	return klog.NewContext(ctx, h.logger.WithValues("verb", verb)), cancel
}

func (h *Handlers) readyz(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
	if !h.cfg.Ready() {
		http.Error(w, "informer caches not synced", http.StatusServiceUnavailable)
		return
	}
	if h.cfg.Leader != nil && !h.cfg.Leader.Ready() {
		http.Error(w, "not the leader", http.StatusServiceUnavailable)
		return
	}
	_, _ = w.Write([]byte("ok"))
}

// errNoBinder answers bind on handlers built without a Binder.
var errNoBinder = errors.New("gpushare extender serves no binds here")

// errNotReady answers the verbs until the cache holds the informers'
// initial lists. Before that every card looks empty, and a filter would
// admit pods that do not fit.
var errNotReady = errors.New("gpushare extender is starting: informer caches not synced yet; the scheduler will retry")

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// observe records a verb's latency and logs its error once, with ctx's
// logger. That logger already names the verb and, once decoded, the pod.
func (h *Handlers) observe(ctx context.Context, verb string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
		klog.FromContext(ctx).Error(err, "Extender request failed")
	}
	h.metrics.latency.WithLabelValues(verb, result).Observe(time.Since(start).Seconds())
}

// verbArgs are the requests of the verbs serveVerb serves.
type verbArgs interface {
	*extenderv1.ExtenderArgs | *extenderv1.ExtenderPreemptionArgs
}

// serveVerb serves one filter, prioritize or preempt request, under the
// verb's deadline (verbContext). It answers errNotReady until the cache is
// rebuilt. It decodes the body into args, names args' pod in the context's
// logger, and calls fn. It records the latency and logs fn's error once
// (observe). Then it writes fn's result, or failure's status and body.
func serveVerb[A verbArgs, Res any](h *Handlers, w http.ResponseWriter, r *http.Request, verb string, args A,
	fn func(context.Context, A) (Res, error), failure func(error) (int, any)) {
	start := time.Now()
	ctx, cancel := h.verbContext(r, verb)
	defer cancel()
	res, err := func() (Res, error) {
		var none Res
		if !h.cfg.Ready() {
			return none, errNotReady
		}
		pod, err := decodeVerb(w, r, args)
		if err != nil {
			return none, err
		}
		ctx = withPod(ctx, pod)
		return fn(ctx, args)
	}()
	h.observe(ctx, verb, start, err)
	if err != nil {
		status, body := failure(err)
		writeJSON(w, status, body)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// decodeVerb decodes r's body into args and returns args' pod. Filter's
// and prioritize's node names go through extenderwire's own scanner.
func decodeVerb(w http.ResponseWriter, r *http.Request, args any) (*corev1.Pod, error) {
	switch a := args.(type) {
	case *extenderv1.ExtenderArgs:
		err := extenderwire.DecodeArgs(w, r, a)
		return a.Pod, err
	case *extenderv1.ExtenderPreemptionArgs:
		err := extenderwire.Decode(w, r, a)
		return a.Pod, err
	}
	return nil, fmt.Errorf("no decoder for %T", args)
}

// withPod returns ctx with its logger naming pod, if the request has one.
func withPod(ctx context.Context, pod *corev1.Pod) context.Context {
	if pod == nil {
		return ctx
	}
	return klog.NewContext(ctx, klog.FromContext(ctx).WithValues("pod", klog.KRef(pod.Namespace, pod.Name)))
}

// podArgs validates the pod of a filter or prioritize request. It returns
// what the cache needs of it (demand, card constraints, policy, CPU and
// memory) and the node names. A pod that asks no gpu-mem is an error
// unless cpuOK; its Demand is then nil. Invalid card annotations are an
// error: the pod fits no node until they are fixed.
func podArgs(args *extenderv1.ExtenderArgs, cpuOK bool) (*kubeinfo.PodInfo, []string, error) {
	if args.Pod == nil {
		return nil, nil, errors.New("request has no pod")
	}
	info := kubeinfo.NewPodInfo(args.Pod)
	if info.Demand == nil {
		_, err := gpushare.PodDemand(args.Pod) // say why
		if !cpuOK || !errors.Is(err, gpushare.ErrNoGPUMem) {
			return nil, nil, fmt.Errorf("pod %s/%s: %w", args.Pod.Namespace, args.Pod.Name, err)
		}
	}
	if info.ConstraintsErr != nil {
		return nil, nil, fmt.Errorf("pod %s/%s: %w; it fits no node until the annotation is fixed", args.Pod.Namespace, args.Pod.Name, info.ConstraintsErr)
	}
	// The cache builds the policy. Check only the name here, so that the
	// error names the pod and its annotation.
	if info.Policy != "" && !slices.Contains(allocator.PolicyNames(), info.Policy) {
		_, err := allocator.New(info.Policy, nil, nil) // say why
		return nil, nil, fmt.Errorf("pod %s/%s annotation %s: %w", args.Pod.Namespace, args.Pod.Name, gpushare.AnnotationPolicy, err)
	}
	var names []string
	switch {
	case args.NodeNames != nil:
		names = *args.NodeNames
	case args.Nodes != nil:
		for i := range args.Nodes.Items {
			names = append(names, args.Nodes.Items[i].Name)
		}
	}
	return info, names, nil
}

func (h *Handlers) filter(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	var args extenderv1.ExtenderArgs
	defer extenderwire.ReleaseNames(&args) // after the answer is written
	serveVerb(h, w, r, "filter", &args, h.filterPod, func(err error) (int, any) {
		return http.StatusOK, &extenderv1.ExtenderFilterResult{Error: err.Error()}
	})
}

// filterPod answers filter for args, decoded, with ctx's logger naming its
// pod.
func (h *Handlers) filterPod(ctx context.Context, args *extenderv1.ExtenderArgs) (*extenderv1.ExtenderFilterResult, error) {
	if args.Pod != nil && gpushare.AsksDRAClaim(args.Pod) {
		return h.filterDRA(ctx, args)
	}
	pod, names, err := podArgs(args, false)
	if err != nil {
		return nil, err
	}
	var fit []string
	var failed map[string]string
	err = h.searching(ctx, pod, func() (err error) {
		if h.cfg.FilterAll {
			fit, failed, err = h.cfg.Placer.Filter(ctx, pod, names)
		} else {
			fit, failed, err = h.cfg.Placer.FilterBest(ctx, pod, names)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(fit) == 0 && h.cfg.Preempt != nil && !undecided(failed) {
		h.cfg.Preempt.Unschedulable(ctx, pod, args.Pod, names)
	}
	klog.FromContext(ctx).V(4).Info("Filtered", "fit", len(fit), "failed", len(failed))
	if logger := klog.FromContext(ctx).V(5); logger.Enabled() {
		for node, reason := range failed {
			logger.Info("Node rejected", "node", node, "reason", reason)
		}
	}
	return filterResult(args, fit, failed), nil
}

// undecided reports whether the search of some node in failed stopped
// before it could tell whether the pod fits there: its request's budget
// was spent (allocator.Undecided). The pod may then fit without evicting
// anyone, so filter starts no preemption for it.
func undecided(failed map[string]string) bool {
	for _, reason := range failed {
		if allocator.Undecided(reason) {
			return true
		}
	}
	return false
}

// filterResult answers in the form the request came in. A scheduler with
// nodeCacheCapable: true sends NodeNames and reads NodeNames back. One
// without sends whole Nodes and reads only Nodes back, ignoring NodeNames.
// So the Nodes of the request that fit are returned, in the request's
// order.
//
// The failed nodes' reasons travel only when no node fits. kube-scheduler
// reads them only then: for its FailedScheduling event, and for which
// nodes a preemption may help. When some node fits, it decodes them into a
// status per node in its one-pod-at-a-time cycle, and only counts them in
// a log line. The extender logs them at V(5).
func filterResult(args *extenderv1.ExtenderArgs, fit []string, failed map[string]string) *extenderv1.ExtenderFilterResult {
	if len(fit) > 0 {
		failed = nil
	}
	if args.NodeNames == nil && args.Nodes != nil {
		keep := make(map[string]bool, len(fit))
		for _, n := range fit {
			keep[n] = true
		}
		nodes := &corev1.NodeList{Items: make([]corev1.Node, 0, len(fit))}
		for i := range args.Nodes.Items {
			if keep[args.Nodes.Items[i].Name] {
				nodes.Items = append(nodes.Items, args.Nodes.Items[i])
			}
		}
		return &extenderv1.ExtenderFilterResult{Nodes: nodes, FailedNodes: failed}
	}
	if fit == nil {
		fit = []string{}
	}
	return &extenderv1.ExtenderFilterResult{NodeNames: &fit, FailedNodes: failed}
}

func (h *Handlers) prioritize(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	var args extenderv1.ExtenderArgs
	defer extenderwire.ReleaseNames(&args) // after the answer is written
	serveVerb(h, w, r, "prioritize", &args, h.prioritizePod, func(err error) (int, any) {
		// HostPriorityList has no error field, so an error reply is the
		// only way to say so. The scheduler then ignores this extender's
		// scores for the pod rather than failing it.
		return http.StatusBadRequest, map[string]string{"error": err.Error()}
	})
}

// prioritizePod answers prioritize for args, decoded, with ctx's logger
// naming its pod.
func (h *Handlers) prioritizePod(ctx context.Context, args *extenderv1.ExtenderArgs) (extenderv1.HostPriorityList, error) {
	pod, names, err := podArgs(args, true)
	if err != nil {
		return nil, err
	}
	score := h.cfg.Placer.Score
	if pod.Demand == nil {
		// A pod that asks no gpu-mem: rate the nodes by where its CPU
		// and memory strand the least GPU memory.
		score = h.cfg.Placer.ScoreCPU
	}
	var scores []int64
	err = h.searching(ctx, pod, func() (err error) {
		scores, err = score(ctx, pod, names)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(extenderv1.HostPriorityList, len(names))
	for i, n := range names {
		out[i] = extenderv1.HostPriority{Host: n, Score: scores[i]}
	}
	klog.FromContext(ctx).V(5).Info("Scored", "scores", out)
	return out, nil
}

func (h *Handlers) bind(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	start := time.Now()
	ctx := klog.NewContext(r.Context(), h.logger.WithValues("verb", "bind"))
	var args extenderv1.ExtenderBindingArgs
	err := errNotReady
	if h.cfg.Ready() {
		err = extenderwire.Decode(w, r, &args)
	}
	if err == nil && h.cfg.Binder == nil {
		err = errNoBinder
	}
	if err == nil {
		ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithValues("pod", klog.KRef(args.PodNamespace, args.PodName), "node", args.Node))
		err = h.cfg.Binder.Bind(ctx, args.PodNamespace, args.PodName, args.PodUID, args.Node)
	}
	h.observe(ctx, "bind", start, err)
	h.metrics.binds.WithLabelValues(BindResultOf(err)).Inc()
	res := &extenderv1.ExtenderBindingResult{}
	if err != nil {
		res.Error = err.Error()
	}
	writeJSON(w, http.StatusOK, res)
}

// InspectResult is the body of GET /inspect and /inspect/:node.
type InspectResult = inspectapi.Result

func (h *Handlers) inspect(w http.ResponseWriter, _ *http.Request, ps httprouter.Params) {
	node := ps.ByName("node")
	views, ok := h.cfg.Viewer.Inspect(node)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": fmt.Sprintf("node %q is not known to the extender", node)})
		return
	}
	writeJSON(w, http.StatusOK, InspectResult{Nodes: views, DefaultPolicy: h.cfg.Viewer.DefaultPolicy()})
}

// preempt serves kube-scheduler's preempt verb (ProcessPreemption). Its
// answer has no error field, so a failure is a non-200 answer. As the
// extender is not ignorable, kube-scheduler takes that as a failed
// preemption, and nobody is evicted.
func (h *Handlers) preempt(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	var args extenderv1.ExtenderPreemptionArgs
	serveVerb(h, w, r, "preempt", &args, h.preemptPod, func(err error) (int, any) {
		return http.StatusInternalServerError, map[string]string{"error": err.Error()}
	})
}

// preemptPod answers preempt for args, decoded, with ctx's logger naming
// its pod.
func (h *Handlers) preemptPod(ctx context.Context, args *extenderv1.ExtenderPreemptionArgs) (*extenderv1.ExtenderPreemptionResult, error) {
	if args.Pod == nil {
		return nil, errors.New("request has no pod")
	}
	pod := kubeinfo.NewPodInfo(args.Pod)
	candidates := map[string][]string{}
	for n, mv := range args.NodeNameToMetaVictims {
		for _, v := range mv.Pods {
			candidates[n] = append(candidates[n], v.UID)
		}
	}
	for n, v := range args.NodeNameToVictims {
		for _, vp := range v.Pods {
			candidates[n] = append(candidates[n], string(vp.UID))
		}
	}
	var out map[string]*extenderv1.MetaVictims
	err := h.searching(ctx, pod, func() error {
		if h.cfg.Preempt == nil {
			out = map[string]*extenderv1.MetaVictims{}
			return nil
		}
		out = h.cfg.Preempt.Preempt(ctx, pod, candidates)
		return nil
	})
	return &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: out}, err
}
