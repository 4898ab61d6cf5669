package cache

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// State is where a pod's allocation is in its life (see the package doc).
type State string

const (
	// StateAssumed: cards chosen by bind (or found in an annotation of a
	// pod not yet bound); expires at its deadline unless bound.
	StateAssumed State = "assumed"
	// StateBound: the pod is bound to the node (or its Binding was made).
	StateBound State = "bound"
)

// Errors callers check with errors.Is.
var (
	ErrUnknownNode    = errors.New("node unknown to the extender")
	ErrBoundElsewhere = errors.New("pod already bound to another node")
)

// DefaultAssumeTTL is how long an assumed allocation survives without its
// Binding: longer than a bind's API round trips, short enough that memory
// held for a crashed bind comes back quickly.
const DefaultAssumeTTL = 2 * time.Minute

// Config builds a Cache.
type Config struct {
	// Policy is the default scoring policy name (allocator.PolicyNames).
	Policy string
	// AssumeTTL, default DefaultAssumeTTL.
	AssumeTTL time.Duration
	// Clock, default the real clock.
	Clock clock.PassiveClock
}

// Cache is the extender's allocation state. All methods are safe for
// concurrent use; none makes API calls or blocks on I/O.
type Cache struct {
	mu sync.Mutex
	// nodes: node name -> its cards and the pods on them.
	nodes map[string]*nodeState
	// pods: pod UID -> what it holds. A pod may name a node not (yet) in nodes.
	pods map[types.UID]*podState
	// workload learns typical requests from every gpu-mem pod seen once.
	workload *allocator.Workload
	// observed: UIDs of pods already fed to workload; entries leave on delete.
	observed map[types.UID]struct{}

	policy    string        // default policy name; immutable
	assumeTTL time.Duration // immutable
	clock     clock.PassiveClock
}

type nodeState struct {
	// node holds the cards; each card's Used is the sum over pods of
	// podState.perCard for its index.
	node   allocator.Node
	source string // SourceInventory, SourceCapacity or SourceNone
	// invErr explains an ignored inventory annotation; empty when fine.
	invErr string
	// pods: UIDs of the pods charged to this node.
	pods map[types.UID]struct{}
	// missing: units pods hold on card indexes the node no longer has.
	missing int64
	// unattributed: units of gpu-mem pods on this node whose cards are unknown.
	unattributed int64
}

type podState struct {
	namespace, name string
	node            string
	state           State
	// alloc is nil for a pod we did not place (legacy or unattributed).
	alloc *gpushare.Allocation
	// perCard: card index -> units held.
	perCard map[int]int64
	// unattributed: units held on the node on unknown cards.
	unattributed int64
	// deadline of an assumed allocation.
	deadline time.Time
	// annotated: an informer event showed this allocation on the pod. An
	// assumed entry whose annotation later disappears (a failed bind
	// removed it) is released; one not yet annotated (the patch is in
	// flight) is not.
	annotated bool
}

// New returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if cfg.Policy == "" {
		cfg.Policy = allocator.DefaultPolicy
	}
	if _, err := allocator.New(cfg.Policy, nil); err != nil {
		return nil, err
	}
	if cfg.AssumeTTL <= 0 {
		cfg.AssumeTTL = DefaultAssumeTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	return &Cache{
		nodes:     map[string]*nodeState{},
		pods:      map[types.UID]*podState{},
		workload:  allocator.NewWorkload(),
		observed:  map[types.UID]struct{}{},
		policy:    cfg.Policy,
		assumeTTL: cfg.AssumeTTL,
		clock:     cfg.Clock,
	}, nil
}

// SetNode adds or updates a node. An error reports an inventory annotation
// that was ignored (the node is still updated from its capacity).
func (c *Cache) SetNode(node *corev1.Node) error {
	unit, cards, source, invErr := nodeCards(node)
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, ok := c.nodes[node.Name]
	if !ok {
		ns = &nodeState{pods: map[types.UID]struct{}{}}
		c.nodes[node.Name] = ns
	}
	ns.node = allocator.Node{Name: node.Name, Unit: unit, Cards: cards}
	ns.source = source
	ns.invErr = ""
	if invErr != nil {
		ns.invErr = invErr.Error()
	}
	ns.missing, ns.unattributed = 0, 0
	for uid := range ns.pods {
		ns.charge(c.pods[uid], 1)
	}
	return invErr
}

// DeleteNode forgets a node. Its pods stay known, so they are charged again
// if the node comes back.
func (c *Cache) DeleteNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.nodes, name)
}

// charge adds (sign 1) or removes (sign -1) what ps holds to the cards.
func (ns *nodeState) charge(ps *podState, sign int64) {
	for idx, u := range ps.perCard {
		pos := ns.position(idx)
		if pos < 0 {
			ns.missing += sign * u
			continue
		}
		ns.node.Cards[pos].Used += sign * u
	}
	ns.unattributed += sign * ps.unattributed
}

// position returns the position of card index idx in ns.node.Cards, or -1.
func (ns *nodeState) position(idx int) int {
	cards := ns.node.Cards
	if idx >= 0 && idx < len(cards) && cards[idx].Index == idx {
		return idx
	}
	for i := range cards {
		if cards[i].Index == idx {
			return i
		}
	}
	return -1
}

// add records ps under uid and charges its node. The caller holds c.mu and
// has removed any previous entry for uid.
func (c *Cache) add(uid types.UID, ps *podState) {
	c.pods[uid] = ps
	ns, ok := c.nodes[ps.node]
	if !ok {
		// The node event may come later; SetNode charges known pods.
		ns = &nodeState{pods: map[types.UID]struct{}{}, source: SourceNone, node: allocator.Node{Name: ps.node, Unit: gpushare.DefaultUnit}}
		c.nodes[ps.node] = ns
	}
	ns.pods[uid] = struct{}{}
	ns.charge(ps, 1)
}

// remove drops uid's entry, if any, and uncharges its node. The caller holds c.mu.
func (c *Cache) remove(uid types.UID) {
	ps, ok := c.pods[uid]
	if !ok {
		return
	}
	delete(c.pods, uid)
	if ns, ok := c.nodes[ps.node]; ok {
		delete(ns.pods, uid)
		ns.charge(ps, -1)
	}
}

// UpsertPod applies a pod add or update.
func (c *Cache) UpsertPod(pod *corev1.Pod) { c.UpsertPodInfo(NewPodInfo(pod)) }

// UpsertPodInfo applies a pod add or update from the informer.
func (c *Cache) UpsertPodInfo(pod *PodInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if pod.Demand == nil {
		// No gpu-mem (or an invalid request, which no node admits).
		c.remove(pod.UID)
		return
	}
	if _, seen := c.observed[pod.UID]; !seen {
		c.observed[pod.UID] = struct{}{}
		c.workload.Observe(pod.Demand)
	}
	if pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed {
		c.remove(pod.UID)
		return
	}
	alloc := pod.Allocation
	old := c.pods[pod.UID]
	nodeName := pod.NodeName
	switch {
	case nodeName == "" && alloc == nil:
		// Pending and not placed, or our own Assume whose annotation patch
		// has not come back yet (keep it), or whose annotation a failed
		// bind removed (release it).
		if old != nil && old.state == StateAssumed && old.annotated {
			c.remove(pod.UID)
		}
		return
	case nodeName == "":
		// Annotated but not bound: a bind in flight, or one that died.
		if old != nil && old.node == alloc.Node {
			old.annotated = true
			return
		}
		c.remove(pod.UID)
		c.add(pod.UID, &podState{namespace: pod.Namespace, name: pod.Name, node: alloc.Node, state: StateAssumed,
			alloc: alloc, perCard: alloc.PerCard(), deadline: c.clock.Now().Add(c.assumeTTL), annotated: true})
	case alloc != nil && alloc.Node == nodeName:
		// The same allocation (our bind's annotation coming back): confirm
		// it. A different one (the device plugin repaired it to the cards
		// kubelet actually gave): re-charge.
		if old != nil && old.node == nodeName && old.alloc != nil && reflect.DeepEqual(old.alloc, alloc) {
			old.state = StateBound
			return
		}
		c.remove(pod.UID)
		c.add(pod.UID, &podState{namespace: pod.Namespace, name: pod.Name, node: nodeName, state: StateBound, alloc: alloc, perCard: alloc.PerCard()})
	default:
		// Bound without (a matching) allocation: placed by someone else.
		ps := &podState{namespace: pod.Namespace, name: pod.Name, node: nodeName, state: StateBound}
		if pod.LegacyIndex >= 0 {
			ps.perCard = map[int]int64{pod.LegacyIndex: pod.Demand.Total()}
		} else {
			ps.unattributed = pod.Demand.Total()
		}
		if old != nil && old.node == ps.node && old.alloc == nil && old.unattributed == ps.unattributed && mapsEqual(old.perCard, ps.perCard) {
			return
		}
		c.remove(pod.UID)
		c.add(pod.UID, ps)
	}
}

func mapsEqual(a, b map[int]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// DeletePod applies a pod delete from the informer.
func (c *Cache) DeletePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.remove(uid)
	delete(c.observed, uid)
}

// Assume chooses cards for pod on node with the named policy ("" for the
// default) and holds them as assumed until FinishBinding, Forget or the
// deadline. It is idempotent: for a pod that already holds an allocation on
// node it returns that allocation and holds nothing more. It returns
// ErrBoundElsewhere for a pod bound to another node, ErrUnknownNode, or an
// *allocator.FitError.
func (c *Cache) Assume(pod metav1.Object, demand gpushare.Demand, node, policyName string) (*gpushare.Allocation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	uid := pod.GetUID()
	if ps, ok := c.pods[uid]; ok {
		switch {
		case ps.node == node && ps.alloc != nil:
			return ps.alloc, nil
		case ps.state == StateBound:
			return nil, fmt.Errorf("pod %s/%s is on node %s, not %s: %w", pod.GetNamespace(), pod.GetName(), ps.node, node, ErrBoundElsewhere)
		}
		c.remove(uid) // a stale assumption for another node
	}
	ns, ok := c.nodes[node]
	if !ok || ns.source == SourceNone && len(ns.node.Cards) == 0 && len(ns.pods) == 0 {
		return nil, fmt.Errorf("node %s: %w", node, ErrUnknownNode)
	}
	p, err := c.newPolicy(policyName)
	if err != nil {
		return nil, err
	}
	pl, err := allocator.Fit(&ns.node, demand, p)
	if err != nil {
		return nil, err
	}
	alloc := allocator.Allocation(&ns.node, demand, pl)
	c.add(uid, &podState{namespace: pod.GetNamespace(), name: pod.GetName(), node: node, state: StateAssumed,
		alloc: alloc, perCard: alloc.PerCard(), deadline: c.clock.Now().Add(c.assumeTTL)})
	return alloc, nil
}

// FinishBinding marks uid's assumed allocation bound: it no longer expires.
func (c *Cache) FinishBinding(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, ok := c.pods[uid]; ok {
		ps.state = StateBound
		ps.deadline = time.Time{}
	}
}

// Forget releases uid's allocation if it is still only assumed.
func (c *Cache) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, ok := c.pods[uid]; ok && ps.state == StateAssumed {
		c.remove(uid)
	}
}

// Expired names a released assumption.
type Expired struct {
	Namespace, Name, Node string
}

// Expire releases assumed allocations whose deadline has passed and returns them.
func (c *Cache) Expire() []Expired {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Expired
	for uid, ps := range c.pods {
		if ps.state == StateAssumed && now.After(ps.deadline) {
			out = append(out, Expired{Namespace: ps.namespace, Name: ps.name, Node: ps.node})
			c.remove(uid)
		}
	}
	return out
}

// newPolicy returns the named policy (the default for ""), fed with the
// current typical requests (fragaware and fgd use them; the others ignore
// them). The caller holds c.mu.
func (c *Cache) newPolicy(name string) (allocator.Policy, error) {
	if name == "" {
		name = c.policy
	}
	return allocator.New(name, c.workload.Typical())
}

// Filter splits nodes into those where demand fits and those where it
// does not, with the reason for each.
func (c *Cache) Filter(demand gpushare.Demand, nodes []string) (fit []string, failed map[string]string) {
	failed = map[string]string{}
	c.mu.Lock()
	defer c.mu.Unlock()
	var pl allocator.Placement // reused across nodes
	for _, name := range nodes {
		ns, ok := c.nodes[name]
		switch {
		case !ok:
			failed[name] = "node unknown to the gpushare extender (not yet in its informer cache)"
			continue
		case len(ns.node.Cards) == 0:
			reason := "node reports no GPU memory (" + string(gpushare.ResourceGPUMem) + ")"
			if ns.invErr != "" {
				reason += "; " + ns.invErr
			}
			failed[name] = reason
			continue
		}
		// Feasibility does not depend on the policy: the search is complete.
		if err := allocator.FitInto(&ns.node, demand, allocator.Binpack{}, &pl); err != nil {
			var fe *allocator.FitError
			if errors.As(err, &fe) {
				failed[name] = fe.Reason
			} else {
				failed[name] = err.Error()
			}
			continue
		}
		fit = append(fit, name)
	}
	return fit, failed
}

// Score rates each node for demand with the named policy ("" for the
// default), 0..allocator.MaxScore, parallel to nodes. A node where the demand
// does not fit scores 0.
func (c *Cache) Score(demand gpushare.Demand, nodes []string, policyName string) ([]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.newPolicy(policyName)
	if err != nil {
		return nil, err
	}
	raw := make([]float64, len(nodes))
	fits := make([]bool, len(nodes))
	var pl allocator.Placement // reused across nodes
	for i, name := range nodes {
		ns, ok := c.nodes[name]
		if !ok {
			continue
		}
		if err := allocator.FitInto(&ns.node, demand, p, &pl); err != nil {
			continue
		}
		raw[i], fits[i] = p.NodeScore(&ns.node, &pl), true
	}
	var fitRaw []float64
	for i := range nodes {
		if fits[i] {
			fitRaw = append(fitRaw, raw[i])
		}
	}
	norm := allocator.NormalizeScores(fitRaw)
	out := make([]int64, len(nodes))
	for i, j := 0, 0; i < len(nodes); i++ {
		if fits[i] {
			out[i] = norm[j]
			j++
		}
	}
	return out, nil
}

// DefaultPolicy returns the configured default policy name.
func (c *Cache) DefaultPolicy() string { return c.policy }

// Counts returns the numbers of known nodes and of pods holding memory.
func (c *Cache) Counts() (nodes, pods int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes), len(c.pods)
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// CardTotal returns the total units of card index idx on node.
func (c *Cache) CardTotal(node string, idx int) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, ok := c.nodes[node]
	if !ok {
		return 0, false
	}
	pos := ns.position(idx)
	if pos < 0 {
		return 0, false
	}
	return ns.node.Cards[pos].Total, true
}
