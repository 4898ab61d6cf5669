package preemption

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	policyinformers "k8s.io/client-go/informers/policy/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/feed"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/pkg/preemption/planner"
	"github.com/gpushare/gpushare/pkg/sampling"
)

// API is what a preemption writes to the API.
type API interface {
	// Nominate sets status.nominatedNodeName of pod namespace/name to node,
	// provided the pod still has UID uid. "" clears it.
	Nominate(ctx context.Context, namespace, name string, uid types.UID, node string) error
	// Evict asks the Eviction API (policy/v1) to evict pod namespace/name,
	// provided it still has UID uid. The API server refuses (429) an eviction
	// a PodDisruptionBudget forbids. The pod is deleted with its own grace
	// period.
	Evict(ctx context.Context, namespace, name string, uid types.UID) error
}

// Preemption results: the values of the label result of
// gpushare_extender_preemptions_total.
const (
	// Evicting: room is reserved on one node's card, and its victims are being
	// evicted. There are none when pods already leaving free enough.
	Evicting = "evicting"
	// Delegated: the pod's cards fit a node kube-scheduler found for other
	// resources. kube-scheduler evicts its own victims there, and the cards
	// are held meanwhile.
	Delegated = "delegated"
	// Refused: an eviction was refused (a PodDisruptionBudget, or an error),
	// and the room was released.
	Refused = "refused"
	// Abandoned: the room was gone (expired, released, or taken by the pod's
	// bind) before its evictions were all sent. The rest were not sent.
	Abandoned = "abandoned"
)

// preemptTimeout bounds each API call of a preemption, and planTimeout
// the planning of one.
const (
	preemptTimeout = 10 * time.Second
	planTimeout    = 5 * time.Second
)

// preemptQueue is how many reserved preemptions may wait for a worker.
// preemptWorkers is how many run at once. planQueue is how many pods may
// wait for the one planner.
const (
	preemptQueue   = 256
	preemptWorkers = 4
	planQueue      = 256
	maxFruitless   = 4096
)

// Reserver is what a preemption asks of the allocation cache: to plan on
// its cards, and to reserve the room for the pod.
type Reserver interface {
	// PlanPreemptionAfter plans the evictions that make room for pod on one
	// of nodes, with leaving's pods going anyway. It returns nil when nothing
	// does.
	PlanPreemptionAfter(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string, leaving map[string][]types.UID, vs planner.Victims) (*planner.Plan, error)
	// HoldNow returns a plan without victims when pod's cards fit node as
	// they are, nil otherwise.
	HoldNow(ctx context.Context, pod *kubeinfo.PodInfo, node string) *planner.Plan
	// FitsOutside returns a usable node not in nodes where pod fits.
	FitsOutside(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string, usable func(node string) bool) (string, bool)
	// Reserve holds plan's room for its pod; Release gives it back.
	Reserve(plan *planner.Plan, ttl time.Duration) error
	Release(uid types.UID)
	// Reserved returns the node where pod uid holds reserved room.
	Reserved(uid types.UID) (node string, ok bool)
	// LowestPriority is the lowest priority of the pods holding card memory.
	LowestPriority() (int32, bool)
	// Generation counts the cache's changes.
	Generation() uint64
}

// PodReader reads pods from an informer (feed.Feeder).
type PodReader interface {
	Pod(namespace, name string) (*kubeinfo.PodInfo, bool)
}

// Fencer bounds each write to this replica's term as leader
// (leader.Gate.Fence). done is called when the write has returned.
type Fencer interface {
	Fence(ctx context.Context) (fenced context.Context, done func(), err error)
}

var (
	_ Reserver  = (*cache.Cache)(nil)
	_ PodReader = (*feed.Feeder)(nil)
)

// Config builds a Preemptor.
type Config struct {
	// Cache holds the cards and the room preemptions reserve.
	Cache Reserver
	// API makes the nominations and evictions.
	API API
	// Pods reads the victims. Nodes reads the nodes kube-scheduler did not
	// send.
	Pods  PodReader
	Nodes NodeReader
	// Budgets is the PodDisruptionBudget informer. Its factory's owner starts
	// it.
	Budgets policyinformers.PodDisruptionBudgetInformer
	// TTL is how long reserved room waits for its pod beyond the victims'
	// grace period (cache.Reserve). It is cache.DefaultAssumeTTL when zero.
	TTL time.Duration
	// Fence, when set, fences every write; several replicas set it.
	Fence Fencer
	// PercentageOfNodesToScore is kube-scheduler's, 0 to 100; 0 is its
	// adaptive default. From it and the cluster's size the preemptor tells
	// whether kube-scheduler may have stopped filtering early.
	PercentageOfNodesToScore int32
}

// Validate reports what is missing or out of range.
func (c *Config) Validate() error {
	var errs []error
	if c.Cache == nil || c.API == nil || c.Pods == nil || c.Nodes == nil || c.Budgets == nil {
		errs = append(errs, errors.New("preemptor: the cache, API, pod and node readers and budgets are all needed"))
	}
	if p := c.PercentageOfNodesToScore; p < 0 || p > 100 {
		errs = append(errs, fmt.Errorf("percentage of nodes to score %d: want 0 (adaptive) to 100", p))
	}
	if c.TTL < 0 {
		errs = append(errs, fmt.Errorf("reservation TTL %s: want a positive duration (or zero for %s)", c.TTL, cache.DefaultAssumeTTL))
	}
	return errors.Join(errs...)
}

// Preemptor evicts the lower-priority pods of one card for a pending pod of
// higher priority (docs/design/preemption.md). The filter verb calls
// Unschedulable when a pod fits none of the nodes kube-scheduler sent. The
// preempt verb (ProcessPreemption) calls Preempt with kube-scheduler's own
// candidates. Neither plans in the verb: they queue the pod for the
// planner. The planner plans in the cache (cache.PlanPreemption) and
// reserves the room (cache.Reserve, no API call). It then queues the writes
// for the workers: the pod's status.nominatedNodeName, then one Eviction
// per victim.
//
//	verb ──(can it preempt? cheap checks)──► plans ──► planner ──Reserve──► queue ──► workers
//	                                                                              nominate, evict
type Preemptor struct {
	cfg     Config
	victims *podVictims

	// plans holds the pods waiting for the planner. planning: pod UID ->
	// struct{}, each pod queued or being planned, one request per pod.
	plans    chan *planRequest
	planning sync.Map
	// queue holds the reserved plans waiting for a worker.
	queue chan *planner.Plan
	// fruitless: pod UID -> the stamp when its last plan found nothing. The
	// pod is not planned again until the cache or the budgets change: a plan
	// of the same inputs finds the same nothing. fruitlessSize counts the
	// entries; past maxFruitless they are all dropped.
	fruitless     sync.Map
	fruitlessSize atomic.Int64

	results        *prometheus.CounterVec // result -> preemptions
	victimsEvicted prometheus.Counter
	logger         klog.Logger
}

// planRequest is one pod for the planner.
type planRequest struct {
	pod *kubeinfo.PodInfo
	// nodes to plan on: a copy, as the verb's own slice is pooled.
	nodes []string
	// outside, when set, is the pod's nodeFilter. kube-scheduler may have
	// stopped filtering before it found the nodes where the pod fits. Nobody
	// is evicted while one of the nodes it did not send fits.
	outside *nodeFilter
}

// New returns a preemptor; Start runs it.
func New(logger klog.Logger, cfg Config) (*Preemptor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.TTL = cmp.Or(cfg.TTL, cache.DefaultAssumeTTL)
	victims, err := newPodVictims(cfg.Pods, cfg.Budgets)
	if err != nil {
		return nil, err
	}
	return &Preemptor{
		cfg: cfg, logger: logger,
		victims: victims,
		plans:   make(chan *planRequest, planQueue),
		queue:   make(chan *planner.Plan, preemptQueue),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "preemptions_total",
			Help: "Preemptions for pending GPU pods, by result: evicting (room reserved on one card, its lower-priority pods evicted), delegated (kube-scheduler evicts for other resources, the cards held), refused (an eviction refused; the room released) or abandoned (the room gone before its evictions were sent).",
		}, []string{"result"}),
		victimsEvicted: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "gpushare", Subsystem: "extender", Name: "preemption_victims_total",
			Help: "Pods the extender evicted through the Eviction API to make room on a card for a pod of higher priority.",
		}),
	}, nil
}

// Register adds the preemption metrics to reg.
func (p *Preemptor) Register(reg prometheus.Registerer) error {
	for _, r := range []string{Evicting, Delegated, Refused, Abandoned} {
		p.results.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{p.results, p.victimsEvicted} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("registering the preemption metrics: %w", err)
		}
	}
	return nil
}

// Start starts the planner and the workers; both stop with ctx. No
// preemption is planned until the budgets' informer has synced.
func (p *Preemptor) Start(ctx context.Context) {
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case req := <-p.plans:
				p.planFor(ctx, req)
				p.planning.Delete(req.pod.UID)
			}
		}
	}()
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

// Synced reports whether the budgets' informer has synced. Until then no
// preemption is planned.
func (p *Preemptor) Synced() bool { return p.victims.synced() }

// Idle reports whether no pod waits for the planner or is being planned.
func (p *Preemptor) Idle() bool {
	idle := true
	p.planning.Range(func(any, any) bool { idle = false; return false })
	return idle
}

// canPreempt says why pod may not evict anyone now, "" when it may. It may
// not when it asks no gpu-mem or asks invalidly, its preemptionPolicy is
// Never, the budgets are not known yet, or it holds reserved room already.
// With gpuVictims it also may not when no pod holding card memory has a
// lower priority. The victims of the extender's own plans hold card
// memory; kube-scheduler's, for other resources, need not. It reads only
// the cache.
func (p *Preemptor) canPreempt(pod *kubeinfo.PodInfo, gpuVictims bool) string {
	switch {
	case pod.Demand == nil || pod.ConstraintsErr != nil:
		return "the pod asks no valid GPU memory"
	case pod.PreemptNever:
		return "the pod's preemptionPolicy is Never"
	case !p.victims.synced():
		return "the PodDisruptionBudgets are not synced yet"
	}
	if _, ok := p.cfg.Cache.Reserved(pod.UID); ok {
		return "the pod holds reserved room already"
	}
	if !gpuVictims {
		return ""
	}
	if lowest, ok := p.cfg.Cache.LowestPriority(); !ok || lowest >= pod.Priority {
		return "no pod holding GPU memory has a lower priority"
	}
	return ""
}

// Unschedulable is called by filter when pod (spec, its PodInfo) fits none
// of nodes, the nodes that passed kube-scheduler's own filters. It queues
// the pod for the planner. The planner reserves room on the best card that
// evicting lower-priority pods frees, and queues the evictions.
// Unschedulable does nothing for a pod that cannot preempt (canPreempt).
// It also does nothing for kube-scheduler's trial of the pod's nominated
// node alone, as a filter of all nodes follows. It makes no API call and
// plans nothing itself.
func (p *Preemptor) Unschedulable(ctx context.Context, pod *kubeinfo.PodInfo, spec *corev1.Pod, nodes []string) {
	if len(nodes) == 0 || len(nodes) == 1 && nodes[0] == spec.Status.NominatedNodeName {
		return
	}
	req := &planRequest{pod: pod, nodes: slices.Clone(nodes)}
	if sampling.MayHaveStopped(p.cfg.PercentageOfNodesToScore, p.cfg.Nodes.NodeCount(), len(nodes)) {
		req.outside = newNodeFilter(spec)
	}
	p.enqueue(ctx, req)
}

// enqueue queues req unless its pod cannot preempt, is queued already, or
// the queue is full.
func (p *Preemptor) enqueue(ctx context.Context, req *planRequest) {
	logger := klog.FromContext(ctx)
	if why := p.canPreempt(req.pod, true); why != "" {
		logger.V(5).Info("Not preempting", "reason", why)
		return
	}
	if st, ok := p.fruitless.Load(req.pod.UID); ok && st == p.stamp() {
		logger.V(5).Info("Not preempting: nothing changed since the last plan found nothing")
		return
	}
	if _, queued := p.planning.LoadOrStore(req.pod.UID, struct{}{}); queued {
		return
	}
	select {
	case p.plans <- req:
		logger.V(4).Info("Queued for a preemption plan", "nodes", len(req.nodes))
	default:
		p.planning.Delete(req.pod.UID)
		logger.Error(nil, "Not preempting: too many pods wait for a preemption plan", "queued", cap(p.plans))
	}
}

// planFor plans, reserves and starts a preemption for req, within
// planTimeout.
func (p *Preemptor) planFor(ctx context.Context, req *planRequest) {
	ctx, cancel := context.WithTimeout(ctx, planTimeout)
	defer cancel()
	logger := p.logger.WithValues("pod", klog.KRef(req.pod.Namespace, req.pod.Name))
	ctx = klog.NewContext(ctx, logger)
	if why := p.canPreempt(req.pod, true); why != "" {
		logger.V(5).Info("Not preempting", "reason", why)
		return
	}
	st := p.stamp()
	if req.outside != nil {
		usable := func(name string) bool {
			n, ok := p.cfg.Nodes.Node(name)
			return ok && req.outside.usable(n)
		}
		if node, ok := p.cfg.Cache.FitsOutside(ctx, req.pod, req.nodes, usable); ok {
			logger.V(4).Info("Not preempting: the pod fits a node kube-scheduler did not send", "fits", node)
			p.noPlan(req.pod.UID, st)
			return
		}
	}
	plan, err := p.plan(ctx, req.pod, req.nodes, nil)
	switch {
	case err != nil:
		logger.Error(err, "Planning a preemption")
	case plan == nil:
		p.noPlan(req.pod.UID, st)
	default:
		p.fruitless.Delete(req.pod.UID)
		p.start(ctx, plan)
	}
}

// planStamp is what a plan's outcome depends on besides its request.
type planStamp struct{ cache, budgets uint64 }

// stamp reads the generations of the cache and the budgets.
func (p *Preemptor) stamp() planStamp {
	return planStamp{cache: p.cfg.Cache.Generation(), budgets: p.victims.generation.Load()}
}

// noPlan records that pod uid's plan at st found nothing.
func (p *Preemptor) noPlan(uid types.UID, st planStamp) {
	if _, loaded := p.fruitless.Swap(uid, st); !loaded && p.fruitlessSize.Add(1) > maxFruitless {
		p.fruitless.Clear()
		p.fruitlessSize.Store(0)
	}
}

// plan plans and reserves a preemption for pod on nodes, where the pods
// leaving[node] names go anyway (cache.PlanPreemptionAfter). It plans
// again once if a node changed before the room could be reserved. It
// returns nil when there is no plan.
func (p *Preemptor) plan(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string, leaving map[string][]types.UID) (*planner.Plan, error) {
	for try := 0; ; try++ {
		plan, err := p.cfg.Cache.PlanPreemptionAfter(ctx, pod, nodes, leaving, p.victims.forPlan())
		if err != nil || plan == nil {
			return nil, err
		}
		err = p.cfg.Cache.Reserve(plan, p.cfg.TTL)
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

// start queues plan's writes. A full queue releases the room.
func (p *Preemptor) start(ctx context.Context, plan *planner.Plan) {
	logger := klog.FromContext(ctx)
	select {
	case p.queue <- plan:
		p.results.WithLabelValues(Evicting).Inc()
		victims := make([]string, len(plan.Victims))
		for i, v := range plan.Victims {
			victims[i] = v.Namespace + "/" + v.Name
		}
		logger.V(2).Info("Preempting: room reserved", "node", plan.Node, "units", plan.Units, "victims", victims)
	default:
		p.cfg.Cache.Release(plan.UID)
		logger.Error(nil, "Not preempting: too many preemptions queued", "queued", cap(p.queue))
	}
}

// Preempt answers kube-scheduler's preempt verb for pod. candidates maps
// each node kube-scheduler would preempt on to the UIDs of its victims
// there. kube-scheduler counts a node's GPU memory as one pool, so its
// victims free memory on no card in particular. So Preempt never lets it
// evict GPU pods for GPU memory:
//   - Where pod's cards fit a candidate as they are, kube-scheduler
//     preempts there for CPU, memory or else. Preempt returns that one node
//     with kube-scheduler's victims, and reserves the cards meanwhile.
//   - Otherwise it plans its own preemption on the candidates. There,
//     kube-scheduler's victims that hold no card memory go anyway: a
//     candidate failed kube-scheduler's filters for reasons they fix (CPU,
//     memory, anti-affinity). Preempt evicts the plan's GPU victims itself,
//     by card and through the Eviction API. It returns the plan's node with
//     those other victims of kube-scheduler's, none of its GPU ones.
//   - Without a plan it returns no node, so kube-scheduler evicts nobody.
//
// Candidates are few, as kube-scheduler's dry run picks them, so Preempt
// plans in the verb.
func (p *Preemptor) Preempt(ctx context.Context, pod *kubeinfo.PodInfo, candidates map[string][]string) map[string]*extenderv1.MetaVictims {
	out := map[string]*extenderv1.MetaVictims{}
	if why := p.canPreempt(pod, false); why != "" {
		klog.FromContext(ctx).V(5).Info("Not preempting", "reason", why)
		return out
	}
	logger := klog.FromContext(ctx)
	nodes := make([]string, 0, len(candidates))
	for n := range candidates {
		nodes = append(nodes, n)
	}
	// Fewest victims first, then by name, so that the choice does not
	// depend on map order.
	slices.SortFunc(nodes, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(candidates[a]), len(candidates[b])), cmp.Compare(a, b))
	})
	for _, n := range nodes {
		hold := p.cfg.Cache.HoldNow(ctx, pod, n)
		if hold == nil {
			continue
		}
		// The cards wait for kube-scheduler's victims, whatever their grace.
		for _, uid := range candidates[n] {
			hold.Awaited = append(hold.Awaited, types.UID(uid))
		}
		if err := p.cfg.Cache.Reserve(hold, p.cfg.TTL); err != nil {
			logger.V(4).Info("Could not hold the cards while kube-scheduler preempts", "node", n, "err", err)
		}
		mv := &extenderv1.MetaVictims{Pods: make([]*extenderv1.MetaPod, len(candidates[n]))}
		for i, uid := range candidates[n] {
			mv.Pods[i] = &extenderv1.MetaPod{UID: uid}
		}
		out[n] = mv
		p.results.WithLabelValues(Delegated).Inc()
		logger.V(2).Info("Preemption left to kube-scheduler: the pod's cards fit, it lacks other resources", "node", n, "victims", len(mv.Pods))
		return out
	}
	leaving := make(map[string][]types.UID, len(candidates))
	for n, uids := range candidates {
		for _, uid := range uids {
			leaving[n] = append(leaving[n], types.UID(uid))
		}
	}
	if why := p.canPreempt(pod, true); why != "" {
		logger.V(5).Info("Not preempting", "reason", why)
		return out
	}
	plan, err := p.plan(ctx, pod, nodes, leaving)
	if err != nil {
		logger.Error(err, "Planning a preemption")
		return out
	}
	if plan == nil {
		return out
	}
	p.start(ctx, plan)
	if len(plan.Awaited) > 0 {
		mv := &extenderv1.MetaVictims{Pods: make([]*extenderv1.MetaPod, len(plan.Awaited))}
		for i, uid := range plan.Awaited {
			mv.Pods[i] = &extenderv1.MetaPod{UID: string(uid)}
		}
		out[plan.Node] = mv
		logger.V(2).Info("Preempting by card; kube-scheduler evicts its victims that hold no GPU memory there", "node", plan.Node, "victims", len(mv.Pods))
	}
	return out
}

// execute makes plan's writes: the nomination, then the evictions, those
// covered by a PodDisruptionBudget first. Before each it checks that the
// pod still holds the room on plan.Node. Once the room has expired, been
// released or been taken by the pod's bind, nothing more is sent. A refused
// eviction (a budget exhausted since the plan, an error) stops it. The room
// is then released and the nomination cleared; the pods already evicted
// stay gone.
func (p *Preemptor) execute(ctx context.Context, plan *planner.Plan) {
	logger := p.logger.WithValues("pod", klog.KRef(plan.Namespace, plan.Name), "node", plan.Node)
	nominated := false
	abandon := func(sent int) {
		p.results.WithLabelValues(Abandoned).Inc()
		logger.V(2).Info("Preemption abandoned: the pod no longer holds the room", "evicted", sent, "notEvicted", len(plan.Victims)-sent)
		if nominated {
			p.clearNomination(ctx, logger, plan)
		}
	}
	if !p.holds(plan) {
		abandon(0)
		return
	}
	err := p.write(ctx, func(ctx context.Context) error {
		return p.cfg.API.Nominate(ctx, plan.Namespace, plan.Name, plan.UID, plan.Node)
	})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		// The pod is gone, or re-created: its room with it.
		p.cfg.Cache.Release(plan.UID)
		logger.V(2).Info("Preemption dropped: the pod is gone", "err", err)
		return
	case err != nil:
		// The nomination only tells kube-scheduler where to look first.
		logger.Error(err, "Could not nominate the node; evicting anyway")
	default:
		nominated = true
	}
	victims := slices.Clone(plan.Victims)
	slices.SortStableFunc(victims, func(a, b planner.PlannedVictim) int {
		return -cmp.Compare(min(len(a.Budgets), 1), min(len(b.Budgets), 1))
	})
	for i, v := range victims {
		if !p.holds(plan) {
			abandon(i)
			return
		}
		err := p.write(ctx, func(ctx context.Context) error { return p.cfg.API.Evict(ctx, v.Namespace, v.Name, v.UID) })
		switch {
		case err == nil:
			p.victimsEvicted.Inc()
			logger.V(2).Info("Evicted a pod of lower priority", "victim", klog.KRef(v.Namespace, v.Name), "priority", v.Priority, "units", v.Units)
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
			// Gone already, or re-created under its name: not ours to evict.
			logger.V(4).Info("Victim already gone", "victim", klog.KRef(v.Namespace, v.Name))
		default:
			p.cfg.Cache.Release(plan.UID)
			p.results.WithLabelValues(Refused).Inc()
			logger.Error(err, "Eviction refused; preemption abandoned and its room released", "victim", klog.KRef(v.Namespace, v.Name),
				"budgets", v.Budgets)
			p.clearNomination(ctx, logger, plan)
			return
		}
	}
}

// holds reports whether plan's pod still holds its reserved room on
// plan.Node.
func (p *Preemptor) holds(plan *planner.Plan) bool {
	node, ok := p.cfg.Cache.Reserved(plan.UID)
	return ok && node == plan.Node
}

// clearNomination clears the nomination execute wrote for plan.
func (p *Preemptor) clearNomination(ctx context.Context, logger klog.Logger, plan *planner.Plan) {
	if err := p.write(ctx, func(ctx context.Context) error {
		return p.cfg.API.Nominate(ctx, plan.Namespace, plan.Name, plan.UID, "")
	}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		logger.Error(err, "Could not clear the nomination")
	}
}

// write runs one API call under preemptTimeout. When Fence is set, the
// call is fenced to this replica's term.
func (p *Preemptor) write(ctx context.Context, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, preemptTimeout)
	defer cancel()
	if p.cfg.Fence == nil {
		return call(ctx)
	}
	fenced, done, err := p.cfg.Fence.Fence(ctx)
	if err != nil {
		return err
	}
	defer done()
	return call(fenced)
}
