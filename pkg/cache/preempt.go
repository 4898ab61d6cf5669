package cache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache/internal/view"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/pkg/preemption/planner"
)

// StateReserved: room a preemption keeps on one node's cards for a pending
// pod while the pods evicted for it terminate (Reserve). See the package
// doc for its states and its credit.
const StateReserved State = "reserved"

// Errors Reserve returns, checked with errors.Is.
var (
	// ErrPlanStale: the node changed since the plan was made.
	ErrPlanStale = errors.New("the node changed since the preemption was planned")
	// ErrPodPlaced: the pod already holds room (reserved, assumed or bound).
	ErrPodPlaced = errors.New("the pod already holds room")
)

// LowestPriority returns the lowest priority among the pods holding memory
// on cards (reservations aside), and false when there is none. A pod of
// that priority or below can evict nobody.
func (c *Cache) LowestPriority() (int32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	lowest, ok := int32(math.MaxInt32), false
	for p := range c.priorities {
		lowest, ok = min(lowest, p), true
	}
	return lowest, ok
}

// Reserved returns the node where pod uid holds reserved room, and whether
// it does.
func (c *Cache) Reserved(uid types.UID) (node string, ok bool) {
	if c.reservations.Load() == 0 {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, found := c.pods[uid]; found && ps.state == StateReserved {
		return ps.node, true
	}
	return "", false
}

// creditFor returns pod uid's reserved room, nil when it has none. It takes
// the lock only while some reservation stands.
func (c *Cache) creditFor(uid types.UID) *view.Credit {
	if c.reservations.Load() == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.creditLocked(uid)
}

// creditLocked is creditFor for a caller holding c.mu.
func (c *Cache) creditLocked(uid types.UID) *view.Credit {
	ps, ok := c.pods[uid]
	if !ok || ps.state != StateReserved {
		return nil
	}
	h := c.hosts[uid]
	return &view.Credit{Node: ps.node, PerCard: ps.perCard, MilliCPU: h.milliCPU, MemMiB: h.memMiB}
}

// HoldNow returns a plan without victims for pod on node when its demand
// fits the node's cards as they are, nil otherwise. With Reserve, it keeps
// that room while kube-scheduler evicts pods for the pod's other resources.
func (c *Cache) HoldNow(ctx context.Context, pod *kubeinfo.PodInfo, node string) *planner.Plan {
	if pod.Placeable() != nil {
		return nil
	}
	cp, ok := c.copyNode(node, nil, pod.MPSUser)
	if !ok {
		return nil
	}
	var pl allocator.Placement
	if view.FitReason(&cp.Node.Node, cp.source, cp.invErr, pod, allocator.Binpack{}, &pl, allocator.NewBudget(ctx, allocator.DefaultRequestSteps)) != "" {
		return nil
	}
	return planner.Hold(&cp.Node, pod, &pl)
}

// MaxVictimWait bounds how long reserved room waits, beyond its deadline,
// for victims still on their node. They may have a longer grace period than
// the one known, be kube-scheduler's own victims, or be on a node that does
// not answer.
const MaxVictimWait = time.Hour

// Reserve holds plan's room for its pod until the first of: the pod is
// bound (its bind takes the room), deleted, or ttl plus the victims'
// longest grace period has passed. Release gives it back. While a victim,
// or a pod of Awaited, still holds its node at that deadline, the room
// waits on, a TTL at a time, up to MaxVictimWait more. A lower-priority pod
// must not take it by card while the pods leaving for it are still there.
// Reserve fails with ErrPlanStale when the node changed since the plan was
// made (plan again), and with ErrPodPlaced when the pod already holds room.
func (c *Cache) Reserve(plan *planner.Plan, ttl time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, ok := c.pods[plan.UID]; ok {
		return fmt.Errorf("pod %s/%s holds %s room on node %s: %w", plan.Namespace, plan.Name, ps.state, ps.node, ErrPodPlaced)
	}
	ns, ok := c.nodes[plan.Node]
	if !ok || ns.gen != plan.Gen || ns.dirty {
		return fmt.Errorf("reserving room for pod %s/%s on node %s: %w", plan.Namespace, plan.Name, plan.Node, ErrPlanStale)
	}
	victims := make([]types.UID, 0, len(plan.Victims)+len(plan.Awaited))
	for _, v := range plan.Victims {
		victims = append(victims, v.UID)
	}
	victims = append(victims, plan.Awaited...)
	deadline := c.clock.Now().Add(ttl + time.Duration(plan.GraceSeconds)*time.Second)
	rare := newPodRare("", victims)
	if rare != nil {
		rare.limit = deadline.Add(MaxVictimWait)
	}
	c.add(plan.UID, &podState{namespace: plan.Namespace, name: plan.Name, node: plan.Node, state: StateReserved, ours: true,
		perCard: allocator.CardUnitsOf(plan.Units), deadline: deadline, rare: rare})
	c.reservations.Add(1)
	c.setHost(plan.UID, plan.Node, plan.MilliCPU, plan.MemoryMiB, true)
	c.publish()
	return nil
}

// Release gives back pod uid's reserved room, if it holds any: its
// preemption failed.
func (c *Cache) Release(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, ok := c.pods[uid]; ok && ps.state == StateReserved {
		c.remove(uid)
		c.publish()
	}
}

// nodeCopy is what a preemption reads of one node, copied under the lock:
// the planner's copy, and where the node's cards come from.
type nodeCopy struct {
	planner.Node
	source, invErr string
}

// fit reports whether pod's demand fits n, cp's cards as a plan changes
// them. It places the demand into pl with binpack, spending b.
func (cp *nodeCopy) fit(pod *kubeinfo.PodInfo, b *allocator.Budget) func(n *allocator.Node, pl *allocator.Placement) bool {
	return func(n *allocator.Node, pl *allocator.Placement) bool {
		return view.FitReason(n, cp.source, cp.invErr, pod, allocator.Binpack{}, pl, b) == ""
	}
}

// copyNode copies node name for a preemption of a pod whose MPS clients
// run as user. The cards the pod may not join are ForeignMPS, whatever it
// would evict there. leaving names by UID pods that leave the node anyway;
// those that hold no card memory there count as gone (awaited). ok is false
// for a node that takes no GPU pods.
func (c *Cache) copyNode(name string, leaving []types.UID, user gpushare.MPSUser) (cp *nodeCopy, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, _, _ := c.gpuNode(name)
	if ns == nil {
		return nil, false
	}
	cp = &nodeCopy{Node: planner.Node{Node: ns.node, Gen: ns.gen, HostKnown: ns.hostKnown,
		FreeMilliCPU: ns.allocMilliCPU - ns.reqMilliCPU, FreeMemMiB: ns.allocMemMiB - ns.reqMemMiB}, source: ns.source, invErr: ns.invErr}
	for _, uid := range leaving {
		if _, gpu := ns.pods[uid]; gpu {
			continue // the plan decides which GPU pods go, by card
		}
		if h, on := c.hosts[uid]; on && h.ns == ns {
			cp.FreeMilliCPU, cp.FreeMemMiB = cp.FreeMilliCPU+h.milliCPU, cp.FreeMemMiB+h.memMiB
			cp.Awaited = append(cp.Awaited, uid)
		}
	}
	cp.Cards = slices.Clone(ns.node.Cards)
	if users := ns.mpsUsers(c.pods); users != nil {
		cp.Node.Node = *view.WithForeignMPS(&cp.Node.Node, users, user)
	}
	cp.Pods = make([]planner.Pod, 0, len(ns.pods))
	for uid := range ns.pods {
		ps := c.pods[uid]
		if ps.state == StateReserved {
			for _, v := range ps.victims() {
				if cp.Leaving == nil {
					cp.Leaving = map[types.UID]bool{}
				}
				cp.Leaving[v] = true
			}
			continue
		}
		h := c.hosts[uid]
		cp.Pods = append(cp.Pods, planner.Pod{UID: uid, Namespace: ps.namespace, Name: ps.name, Settled: ps.state == StateBound && ps.confirmed,
			Terminating: ps.terminating, Priority: ps.priority, PerCard: ps.perCard, Unattributed: ps.unattributed, MilliCPU: h.milliCPU, MemoryMiB: h.memMiB})
	}
	// Map order: sort for plans that do not depend on it.
	slices.SortFunc(cp.Pods, func(a, b planner.Pod) int { return cmp.Compare(a.UID, b.UID) })
	return cp, true
}

// PlanPreemption looks, on nodes in order, for the pods of lower priority
// than pod whose eviction lets pod fit. It returns the best such plan, nil
// when there is none.
//
// On each node it tries each card. The eligible pods holding memory there
// (see below) are all taken away. If pod then fits (cards, and CPU and
// memory when the node reports them), they are given back one at a time,
// most important first: the highest priority, then the longest running.
// Each is kept where pod still fits, as kube-scheduler's preemption does
// with whole nodes. The ones that cannot be kept are the card's victims. A
// pod whose demand spans cards and fits no single card's plan is tried the
// same way over all the node's pods at once. Of all plans, the best evicts
// pods of the lowest highest priority, then of the lowest sum of
// priorities, then the fewest, then the youngest (kube-scheduler's order of
// candidate nodes). The first in nodes' order wins a tie.
//
// A pod may be evicted when it is bound and confirmed by the informer,
// holds memory on known cards, has a lower priority than pod, and is not
// terminating. Every PodDisruptionBudget that covers it must also allow one
// more disruption, and the victims of one plan together exceed no budget.
// Pods already terminating, and the victims of other reservations, count
// as gone; reserved room (Reserve) counts as taken. So a plan may have no
// victims at all: pod fits once the pods already leaving have gone.
//
// It returns an error, naming the pod, when pod may not preempt (it asks no
// gpu-mem, or has invalid card annotations) or ctx ends.
func (c *Cache) PlanPreemption(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string, vs planner.Victims) (*planner.Plan, error) {
	return c.PlanPreemptionAfter(ctx, pod, nodes, nil, vs)
}

// PlanPreemptionAfter is PlanPreemption where, on each node, the pods
// leaving[node] names by UID go anyway. They are kube-scheduler's own
// victims there, evicted for resources other than cards. Those that hold no
// card memory count as gone, their CPU and memory free, and the plan awaits
// them (Plan.Awaited). Those that do are the plan's to choose or keep, by
// card, as any other.
func (c *Cache) PlanPreemptionAfter(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string, leaving map[string][]types.UID, vs planner.Victims) (*planner.Plan, error) {
	if err := pod.Placeable(); err != nil {
		return nil, err
	}
	b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
	var best *planner.Plan
	var bestKey planner.Key
	for i, name := range nodes {
		// A plan copies each node and may ask about each of its pods, so
		// look at ctx before every node.
		if err := view.Stopped(ctx, pod, i, len(nodes)); err != nil {
			return nil, err
		}
		cp, ok := c.copyNode(name, leaving[name], pod.MPSUser)
		if !ok {
			continue
		}
		p, key, _ := planner.Best(&cp.Node, pod, vs, cp.fit(pod, b))
		if p != nil && (best == nil || key.Less(bestKey)) {
			best, bestKey = p, key
			if len(p.Victims) == 0 {
				break // nothing beats evicting no one
			}
		}
	}
	if err := view.Stopped(ctx, pod, len(nodes), len(nodes)); err != nil {
		return nil, err
	}
	return best, nil
}

// FitsOutside returns a node not among nodes where pod could run now, and
// whether there is one. It also returns true, with node "", when a search
// ended with its budget or ctx and one may exist. Such a node has cards
// that fit the pod's demand as they are and room for its CPU and memory
// (where the node reports them). It also passes usable, which stands for
// kube-scheduler's other filters (cordon, taints, node selector and
// affinity); a nil usable passes every node. In a large cluster
// kube-scheduler sends the extender only the first nodes that pass its own
// filters (percentageOfNodesToScore). A pod that fits none of those may fit
// one it did not send, and then nobody should be evicted for it. It reads
// the published copies and takes no lock.
func (c *Cache) FitsOutside(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string, usable func(node string) bool) (string, bool) {
	return c.view.FitsOutside(ctx, pod, nodes, usable)
}
