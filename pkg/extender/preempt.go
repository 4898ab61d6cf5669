package extender

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"
	"github.com/prometheus/client_golang/prometheus"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/cache"
)

// PreemptAPI is what a preemption writes to the API.
type PreemptAPI interface {
	// Nominate sets status.nominatedNodeName of pod namespace/name to node
	// ("" clears it), provided the pod still has UID uid.
	Nominate(ctx context.Context, namespace, name string, uid types.UID, node string) error
	// Evict asks the Eviction API (policy/v1) to evict pod namespace/name,
	// provided it still has UID uid: the API server refuses (429) an
	// eviction a PodDisruptionBudget forbids, and the pod is deleted with
	// its own grace period.
	Evict(ctx context.Context, namespace, name string, uid types.UID) error
}

// Preemption results, the values of gpushare_extender_preemptions_total's
// label result.
const (
	// PreemptEvicting: room reserved on one node's card; its victims are
	// being evicted (none when pods already leaving free enough).
	PreemptEvicting = "evicting"
	// PreemptDelegated: the pod's cards fit a node kube-scheduler found
	// for other resources; kube-scheduler evicts its own victims there,
	// the cards held meanwhile.
	PreemptDelegated = "delegated"
	// PreemptRefused: an eviction was refused (a PodDisruptionBudget, or
	// an error); the room was released.
	PreemptRefused = "refused"
)

// preemptTimeout bounds each API call of a preemption.
const preemptTimeout = 10 * time.Second

// preemptQueue is how many reserved preemptions may wait for a worker, and
// preemptWorkers how many run at once.
const (
	preemptQueue   = 256
	preemptWorkers = 4
)

// Preemptor evicts, for a pending pod of higher priority, the lower-priority
// pods of one card (docs/design/preemption.md). The filter verb calls
// Unschedulable when a pod fits none of the nodes kube-scheduler sent, the
// preempt verb (ProcessPreemption) with kube-scheduler's own candidates.
// Either plans in the cache (cache.PlanPreemption), reserves the room
// (cache.Reserve, no API call) and queues the writes for its workers: the
// pod's status.nominatedNodeName, then one Eviction per victim.
type Preemptor struct {
	cache   *cache.Cache
	api     PreemptAPI
	victims *podVictims
	// TTL is how long reserved room waits for its pod beyond the victims'
	// grace period (cache.Reserve). Set before Start.
	TTL time.Duration
	// Fence, when set (several replicas), fences every write. Set before
	// Start.
	Fence Fencer

	queue          chan *cache.Plan
	results        *prometheus.CounterVec // result -> preemptions
	victimsEvicted prometheus.Counter
	logger         klog.Logger
}

// NewPreemptor returns a preemptor reading pods from pods and
// PodDisruptionBudgets from its own informer on client; Start runs it.
func NewPreemptor(logger klog.Logger, c *cache.Cache, api PreemptAPI, pods PodCache, client kubernetes.Interface) *Preemptor {
	factory := informers.NewSharedInformerFactory(client, 0)
	pdbs := factory.Policy().V1().PodDisruptionBudgets()
	return &Preemptor{
		cache: c, api: api, TTL: cache.DefaultAssumeTTL, logger: logger,
		victims: &podVictims{pods: pods, pdbs: pdbs.Lister(), synced: pdbs.Informer().HasSynced, factory: factory},
		queue:   make(chan *cache.Plan, preemptQueue),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "preemptions_total",
			Help: "Preemptions for pending GPU pods, by result: evicting (room reserved on one card, its lower-priority pods evicted), delegated (kube-scheduler evicts for other resources, the cards held) or refused (an eviction refused; the room released).",
		}, []string{"result"}),
		victimsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "preemption_victims_total",
			Help: "Pods the extender evicted through the Eviction API to make room on a card for a pod of higher priority.",
		}),
	}
}

// Register adds the preemption metrics to reg.
func (p *Preemptor) Register(reg prometheus.Registerer) error {
	for _, r := range []string{PreemptEvicting, PreemptDelegated, PreemptRefused} {
		p.results.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{p.results, p.victimsEvicted} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering the preemption metrics: %w", err)
		}
	}
	return nil
}

// Start starts the PodDisruptionBudget informer and the workers; both stop
// with ctx. Until the informer has synced no preemption is planned.
func (p *Preemptor) Start(ctx context.Context) {
	p.victims.factory.Start(ctx.Done())
	for range preemptWorkers {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case plan := <-p.queue:
					p.execute(ctx, plan)
				}
			}
		}()
	}
}

// eligible reports whether pod may evict others: it asks gpu-mem, its
// preemptionPolicy is not Never, and the budgets are known.
func (p *Preemptor) eligible(pod *cache.PodInfo) bool {
	return pod.Demand != nil && pod.ConstraintsErr == nil && !pod.PreemptNever && p.victims.synced()
}

// Unschedulable is called by filter when pod fits none of nodes, the nodes
// that passed kube-scheduler's own filters: it reserves room on the best
// card that evicting lower-priority pods frees, and queues the evictions.
// It does nothing for a pod that already holds reserved room, for
// kube-scheduler's trial of the pod's nominated node alone (a filter of
// all nodes follows), and when the pod fits a node kube-scheduler did not
// send. It makes no API call.
func (p *Preemptor) Unschedulable(ctx context.Context, pod *cache.PodInfo, nominated string, nodes []string) {
	if !p.eligible(pod) || len(nodes) == 0 || len(nodes) == 1 && nodes[0] == nominated {
		return
	}
	if _, ok := p.cache.Reserved(pod.UID); ok {
		return
	}
	logger := klog.FromContext(ctx)
	if len(nodes) >= minFeasibleNodes {
		// kube-scheduler may have stopped at the first nodes that passed
		// its filters: evict nobody while a node it did not send fits.
		if node, ok := p.cache.FitsOutside(ctx, pod, nodes); ok {
			logger.V(4).Info("Not preempting: the pod fits a node kube-scheduler did not send", "fits", node)
			return
		}
	}
	plan, err := p.plan(ctx, pod, nodes)
	if err != nil {
		logger.Error(err, "Planning a preemption")
		return
	}
	if plan != nil {
		p.start(ctx, plan)
	}
}

// minFeasibleNodes is kube-scheduler's minFeasibleNodesToFind: it sends
// the extender fewer nodes than this only when no more passed its filters.
const minFeasibleNodes = 100

// plan plans and reserves a preemption for pod on nodes, planning again
// once if a node changed before the room could be reserved; nil when there
// is none.
func (p *Preemptor) plan(ctx context.Context, pod *cache.PodInfo, nodes []string) (*cache.Plan, error) {
	for try := 0; ; try++ {
		plan, err := p.cache.PlanPreemption(ctx, pod, nodes, p.victims)
		if err != nil || plan == nil {
			return nil, err
		}
		err = p.cache.Reserve(plan, p.TTL)
		switch {
		case err == nil:
			return plan, nil
		case errors.Is(err, cache.ErrPlanStale) && try == 0:
			continue
		case errors.Is(err, cache.ErrPodPlaced):
			return nil, nil // another request reserved it meanwhile
		}
		return nil, err
	}
}

// start queues plan's writes; a full queue releases the room.
func (p *Preemptor) start(ctx context.Context, plan *cache.Plan) {
	logger := klog.FromContext(ctx)
	select {
	case p.queue <- plan:
		p.results.WithLabelValues(PreemptEvicting).Inc()
		victims := make([]string, len(plan.Victims))
		for i, v := range plan.Victims {
			victims[i] = v.Namespace + "/" + v.Name
		}
		logger.V(2).Info("Preempting: room reserved", "node", plan.Node, "units", plan.Units, "victims", victims)
	default:
		p.cache.Release(plan.UID)
		logger.Error(nil, "Not preempting: too many preemptions queued", "queued", cap(p.queue))
	}
}

// Preempt answers kube-scheduler's preempt verb for pod, whose candidates
// map each node kube-scheduler would preempt on to the UIDs of its
// victims there. kube-scheduler counts a node's GPU memory as one pool, so
// its victims free memory on no card in particular: Preempt never lets it
// evict them for GPU memory. Where pod's cards fit a candidate as they are
// (kube-scheduler preempts there for CPU, memory or else), it returns that
// one node with kube-scheduler's victims, reserving the cards meanwhile;
// otherwise it starts its own preemption on the candidates, if a card can
// be freed, and returns no node, so kube-scheduler evicts nobody.
func (p *Preemptor) Preempt(ctx context.Context, pod *cache.PodInfo, candidates map[string][]string) map[string]*extenderv1.MetaVictims {
	out := map[string]*extenderv1.MetaVictims{}
	if !p.eligible(pod) {
		return out
	}
	if _, ok := p.cache.Reserved(pod.UID); ok {
		return out // its own preemption is under way
	}
	logger := klog.FromContext(ctx)
	nodes := make([]string, 0, len(candidates))
	for n := range candidates {
		nodes = append(nodes, n)
	}
	// Fewest victims first, then by name: the choice does not depend on
	// map order.
	slices.SortFunc(nodes, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(candidates[a]), len(candidates[b])), cmp.Compare(a, b))
	})
	for _, n := range nodes {
		hold := p.cache.HoldNow(ctx, pod, n)
		if hold == nil {
			continue
		}
		if err := p.cache.Reserve(hold, p.TTL); err != nil {
			logger.V(4).Info("Could not hold the cards while kube-scheduler preempts", "node", n, "err", err)
		}
		mv := &extenderv1.MetaVictims{Pods: make([]*extenderv1.MetaPod, len(candidates[n]))}
		for i, uid := range candidates[n] {
			mv.Pods[i] = &extenderv1.MetaPod{UID: uid}
		}
		out[n] = mv
		p.results.WithLabelValues(PreemptDelegated).Inc()
		logger.V(2).Info("Preemption left to kube-scheduler: the pod's cards fit, it lacks other resources", "node", n, "victims", len(mv.Pods))
		return out
	}
	plan, err := p.plan(ctx, pod, nodes)
	if err != nil {
		logger.Error(err, "Planning a preemption")
		return out
	}
	if plan != nil {
		p.start(ctx, plan)
	}
	return out
}

// execute makes plan's writes: the nomination, then the evictions, those
// covered by a PodDisruptionBudget first. An eviction refused (a budget
// exhausted since the plan, an error) stops it: the room is released and
// the nomination cleared, and the pods already evicted stay gone.
func (p *Preemptor) execute(ctx context.Context, plan *cache.Plan) {
	logger := p.logger.WithValues("pod", klog.KRef(plan.Namespace, plan.Name), "node", plan.Node)
	err := p.write(ctx, func(ctx context.Context) error {
		return p.api.Nominate(ctx, plan.Namespace, plan.Name, plan.UID, plan.Node)
	})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// The pod is gone, or re-created: its room with it.
		p.cache.Release(plan.UID)
		logger.V(2).Info("Preemption dropped: the pod is gone", "err", err)
		return
	case err != nil:
		// The nomination only tells kube-scheduler where to look first.
		logger.Error(err, "Could not nominate the node; evicting anyway")
	}
	victims := slices.Clone(plan.Victims)
	slices.SortStableFunc(victims, func(a, b cache.PlannedVictim) int {
		return -cmp.Compare(min(len(a.Budgets), 1), min(len(b.Budgets), 1))
	})
	for _, v := range victims {
		err := p.write(ctx, func(ctx context.Context) error { return p.api.Evict(ctx, v.Namespace, v.Name, v.UID) })
		switch {
		case err == nil:
			p.victimsEvicted.Inc()
			logger.V(2).Info("Evicted a pod of lower priority", "victim", klog.KRef(v.Namespace, v.Name), "priority", v.Priority, "units", v.Units)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone already, or re-created under its name: not ours to evict.
			logger.V(4).Info("Victim already gone", "victim", klog.KRef(v.Namespace, v.Name))
		default:
			p.cache.Release(plan.UID)
			p.results.WithLabelValues(PreemptRefused).Inc()
			logger.Error(err, "Eviction refused; preemption abandoned and its room released", "victim", klog.KRef(v.Namespace, v.Name),
				"budgets", v.Budgets)
			if err := p.write(ctx, func(ctx context.Context) error {
				return p.api.Nominate(ctx, plan.Namespace, plan.Name, plan.UID, "")
			}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				logger.Error(err, "Could not clear the nomination")
			}
			return
		}
	}
}

// write runs one API call under preemptTimeout, fenced to this replica's
// term when Fence is set.
func (p *Preemptor) write(ctx context.Context, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, preemptTimeout)
	defer cancel()
	if p.Fence == nil {
		return call(ctx)
	}
	fenced, done, err := p.Fence.Fence(ctx)
	if err != nil {
		return &notLeaderError{err: err}
	}
	defer done()
	return call(fenced)
}

// podVictims implements cache.Victims with the informer's pods and
// PodDisruptionBudgets.
type podVictims struct {
	pods    PodCache
	pdbs    policylisters.PodDisruptionBudgetLister
	synced  func() bool
	factory informers.SharedInformerFactory
}

var _ cache.Victims = (*podVictims)(nil)

func (v *podVictims) Victim(namespace, name string, uid types.UID) (cache.Victim, bool) {
	pod, ok := v.pods.Pod(namespace, name)
	if !ok || pod.UID != uid {
		return cache.Victim{}, false
	}
	out := cache.Victim{Priority: pod.Priority, StartTime: pod.StartTime, Terminating: pod.Terminating, GraceSeconds: pod.GraceSeconds}
	if len(pod.Labels) == 0 {
		return out, true // a PodDisruptionBudget selects by labels
	}
	budgets, err := v.pdbs.PodDisruptionBudgets(namespace).List(labels.Everything())
	if err != nil {
		return cache.Victim{}, false
	}
	for _, b := range budgets {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(pod.Labels) {
			continue
		}
		out.Budgets = append(out.Budgets, b.Namespace+"/"+b.Name)
	}
	return out, true
}

// Allowed returns the budget's status.disruptionsAllowed, 0 while the
// disruption controller has not processed its spec (the Eviction API then
// refuses too) or when it is unknown.
func (v *podVictims) Allowed(budget string) int32 {
	ns, name, _ := strings.Cut(budget, "/")
	b, err := v.pdbs.PodDisruptionBudgets(ns).Get(name)
	if err != nil || b.Status.ObservedGeneration < b.Generation {
		return 0
	}
	return b.Status.DisruptionsAllowed
}

// ClientPreemptAPI implements PreemptAPI with a clientset.
type ClientPreemptAPI struct {
	Client kubernetes.Interface
}

var _ PreemptAPI = ClientPreemptAPI{}

// Nominate sends a merge patch of the status subresource that also sets
// metadata.uid, so it cannot land on a successor of the same name.
func (a ClientPreemptAPI) Nominate(ctx context.Context, namespace, name string, uid types.UID, node string) error {
	var nominated any = node
	if node == "" {
		nominated = nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid}, "status": map[string]any{"nominatedNodeName": nominated}})
	if err != nil {
		return err
	}
	_, err = a.Client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

func (a ClientPreemptAPI) Evict(ctx context.Context, namespace, name string, uid types.UID) error {
	return a.Client.CoreV1().Pods(namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: namespace, Name: name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
}

// preempt serves kube-scheduler's preempt verb (ProcessPreemption). Its
// answer has no error field: a failure is a non-200 answer, which
// kube-scheduler, the extender being not ignorable, takes as a failed
// preemption: nobody is evicted.
func (h *Handlers) preempt(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	start := time.Now()
	ctx, cancel := h.verbContext(r, "preempt")
	defer cancel()
	var args extenderv1.ExtenderPreemptionArgs
	res, err := func() (*extenderv1.ExtenderPreemptionResult, error) {
		if !h.ready() {
			return nil, errNotReady
		}
		if err := decode(w, r, &args); err != nil {
			return nil, err
		}
		ctx = withPod(ctx, args.Pod)
		if args.Pod == nil {
			return nil, errors.New("request has no pod")
		}
		pod := cache.NewPodInfo(args.Pod)
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
			if h.Preempt == nil {
				out = map[string]*extenderv1.MetaVictims{}
				return nil
			}
			out = h.Preempt.Preempt(ctx, pod, candidates)
			return nil
		})
		return &extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: out}, err
	}()
	h.observe(ctx, "preempt", start, err)
	if err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, res)
}
