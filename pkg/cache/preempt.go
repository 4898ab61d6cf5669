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
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// StateReserved: room a preemption keeps on one node's cards for a pending
// pod while the pods evicted for it terminate (Reserve). It is charged to
// the cards like an allocation, for every pod but its own, whose filter and
// bind see the room as free (the pod's credit); the pod's bind turns it
// into the pod's assumed allocation, on that node or any other.
const StateReserved State = "reserved"

// Errors Reserve returns, checked with errors.Is.
var (
	// ErrPlanStale: the node changed since the plan was made.
	ErrPlanStale = errors.New("the node changed since the preemption was planned")
	// ErrPodPlaced: the pod already holds room (reserved, assumed or bound).
	ErrPodPlaced = errors.New("the pod already holds room")
)

// Victim is what a preemption needs to know of a pod it might evict
// (Victims.Victim).
type Victim struct {
	Priority int32
	// StartTime breaks ties of priority: of two pods, the one started
	// later is evicted first (kube-scheduler's MoreImportantPod).
	StartTime time.Time
	// Terminating: the pod is leaving already; its memory counts as free
	// and it is never evicted again.
	Terminating bool
	// GraceSeconds is its termination grace period: the reservation lasts
	// at least that long beyond Reserve.
	GraceSeconds int64
	// Budgets names the PodDisruptionBudgets the Eviction API checks
	// before it evicts the pod. It refuses a pod that more than one
	// covers, so such a pod is never a victim.
	Budgets []string
}

// Victims describes, to PlanPreemption, the pods charged on a node. The
// planner asks only about pods of a lower priority than the preemptor's,
// and only about those it may evict.
type Victims interface {
	// Victim describes pod namespace/name with UID uid; ok false when the
	// pod is unknown (it then stays, as if it could not be evicted).
	Victim(namespace, name string, uid types.UID) (v Victim, ok bool)
	// Allowed returns how many more pods PodDisruptionBudget budget lets
	// go now (its status.disruptionsAllowed; 0 when unknown).
	Allowed(budget string) int32
}

// Plan is a preemption PlanPreemption found: the pods to evict on one node
// so that a pod fits there, and the room it would take.
type Plan struct {
	// Namespace, Name and UID of the pod the room is for.
	Namespace, Name string
	UID             types.UID
	Node            string
	// Victims to evict, most important first; none when the pods already
	// terminating there free enough.
	Victims []PlannedVictim
	// Units is what the pod would hold: card index -> units (the node's
	// unit), where the demand fits once the victims and the pods already
	// terminating have gone.
	Units map[int]int64
	// GraceSeconds is the longest grace period among the victims.
	GraceSeconds int64
	// Awaited are the UIDs of pods that are to leave the node for the pod
	// besides Victims: kube-scheduler's own victims, which it evicts, where
	// it preempts for other resources and the cards are held (HoldNow), or
	// those of them that hold no card memory (PlanPreemptionAfter).
	Awaited []types.UID
	// milliCPU and memMiB the pod requests; gen the node's generation the
	// plan was made at.
	milliCPU, memMiB int64
	gen              uint64
}

// PlannedVictim is one pod a Plan evicts.
type PlannedVictim struct {
	Namespace, Name string
	UID             types.UID
	Priority        int32
	// Units it holds on the node.
	Units int64
	// Budgets names the PodDisruptionBudgets covering it.
	Budgets []string
}

// LowestPriority returns the lowest priority among the pods holding memory
// on cards (reservations aside), and false when there is none: a pod of
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

// credit is the room reserved for one pod, which that pod's own fit sees as
// free.
type credit struct {
	node     string
	perCard  allocator.CardUnits
	milliCPU int64
	memMiB   int64
}

// creditFor returns pod uid's reserved room, nil when it has none. It
// takes the lock only while some reservation stands.
func (c *Cache) creditFor(uid types.UID) *credit {
	if c.reservations.Load() == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.creditLocked(uid)
}

// creditLocked is creditFor for a caller holding c.mu.
func (c *Cache) creditLocked(uid types.UID) *credit {
	ps, ok := c.pods[uid]
	if !ok || ps.state != StateReserved {
		return nil
	}
	h := c.hosts[uid]
	return &credit{node: ps.node, perCard: ps.perCard, milliCPU: h.milliCPU, memMiB: h.memMiB}
}

// HoldNow returns a plan without victims for pod on node when its demand
// fits the node's cards as they are (with Reserve, it keeps that room
// while kube-scheduler evicts pods for the pod's other resources), nil
// otherwise.
func (c *Cache) HoldNow(ctx context.Context, pod *kubeinfo.PodInfo, node string) *Plan {
	if pod.Placeable() != nil {
		return nil
	}
	cp, ok := c.copyNode(node, nil, pod.MPSUser)
	if !ok {
		return nil
	}
	var pl allocator.Placement
	if fitReason(&cp.node, cp.source, cp.invErr, pod, allocator.Binpack{}, &pl, allocator.NewBudget(ctx, allocator.DefaultRequestSteps)) != "" {
		return nil
	}
	return planOf(cp, pod, nil, &cp.node, &pl)
}

// on returns s as the credit's pod sees it: its reserved room free when s
// is the credit's node, else s itself.
func (cr *credit) on(s *nodeSnap) *nodeSnap {
	if cr == nil || s == nil || s.node.Name != cr.node {
		return s
	}
	out := *s
	out.node = *cr.onNode(&s.node)
	out.freeMilliCPU += cr.milliCPU
	out.freeMemMiB += cr.memMiB
	return &out
}

// onNode returns a copy of n with the credit's units taken off its cards'
// Used when n is the credit's node, else n itself.
func (cr *credit) onNode(n *allocator.Node) *allocator.Node {
	if cr == nil || n.Name != cr.node {
		return n
	}
	out := *n
	out.Cards = slices.Clone(n.Cards)
	for i := range out.Cards {
		out.Cards[i].Used -= cr.perCard.Get(out.Cards[i].Index)
	}
	return &out
}

// MaxVictimWait bounds how long reserved room waits, beyond its deadline,
// for victims still on their node (a grace period longer than the one
// known, kube-scheduler's own victims, a node that does not answer).
const MaxVictimWait = time.Hour

// Reserve holds plan's room for its pod until the pod is bound (its bind
// takes it), deleted, or ttl plus the victims' longest grace period has
// passed, whichever comes first; Release gives it back. While a victim
// (or a pod of Awaited) still holds its node at that deadline, the room
// waits on, a TTL at a time, up to MaxVictimWait more: a lower-priority pod
// must not take it by card while the pods leaving for it are still there. It fails with
// ErrPlanStale when the node changed since the plan was made (plan again),
// and with ErrPodPlaced when the pod already holds room.
func (c *Cache) Reserve(plan *Plan, ttl time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, ok := c.pods[plan.UID]; ok {
		return fmt.Errorf("pod %s/%s holds %s room on node %s: %w", plan.Namespace, plan.Name, ps.state, ps.node, ErrPodPlaced)
	}
	ns, ok := c.nodes[plan.Node]
	if !ok || ns.gen != plan.gen || ns.dirty {
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
	c.setHost(plan.UID, plan.Node, plan.milliCPU, plan.memMiB, true)
	c.publish()
	return nil
}

// Release gives back pod uid's reserved room, if it holds any (its
// preemption failed).
func (c *Cache) Release(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ps, ok := c.pods[uid]; ok && ps.state == StateReserved {
		c.remove(uid)
		c.publish()
	}
}

// nodeCopy is what a preemption reads of one node, copied under the lock.
type nodeCopy struct {
	node           allocator.Node
	source, invErr string
	gen            uint64
	hostKnown      bool
	freeMilliCPU   int64
	freeMemMiB     int64
	pods           []podCopy
	leavingVictims map[types.UID]bool // victims of the node's reservations
	// awaited are the pods that ask no GPU memory and leave the node
	// anyway (PlanPreemptionAfter); their CPU and memory count as free.
	awaited []types.UID
}

// podCopy is one pod charged on a node.
type podCopy struct {
	uid             types.UID
	namespace, name string
	state           State
	confirmed       bool
	terminating     bool
	priority        int32
	perCard         allocator.CardUnits // shared with the pod's entry
	unattributed    int64
	milliCPU        int64
	memMiB          int64
}

// copyNode copies node name for a preemption of a pod whose MPS clients
// run as user (the cards it may not join are ForeignMPS, whatever it would
// evict there); ok is false for a node that takes no GPU pods. Of leaving,
// the UIDs of pods to leave the node anyway, those that hold no card
// memory there count as gone (awaited).
func (c *Cache) copyNode(name string, leaving []types.UID, user gpushare.MPSUser) (cp *nodeCopy, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, _, _ := c.gpuNode(name)
	if ns == nil {
		return nil, false
	}
	cp = &nodeCopy{node: ns.node, source: ns.source, invErr: ns.invErr, gen: ns.gen, hostKnown: ns.hostKnown,
		freeMilliCPU: ns.allocMilliCPU - ns.reqMilliCPU, freeMemMiB: ns.allocMemMiB - ns.reqMemMiB}
	for _, uid := range leaving {
		if _, gpu := ns.pods[uid]; gpu {
			continue // the plan decides which GPU pods go, by card
		}
		if h, on := c.hosts[uid]; on && h.ns == ns {
			cp.freeMilliCPU, cp.freeMemMiB = cp.freeMilliCPU+h.milliCPU, cp.freeMemMiB+h.memMiB
			cp.awaited = append(cp.awaited, uid)
		}
	}
	cp.node.Cards = slices.Clone(ns.node.Cards)
	if users := ns.mpsUsers(c.pods); users != nil {
		cp.node = *withForeignMPS(&cp.node, users, user)
	}
	cp.pods = make([]podCopy, 0, len(ns.pods))
	for uid := range ns.pods {
		ps := c.pods[uid]
		if ps.state == StateReserved {
			for _, v := range ps.victims() {
				if cp.leavingVictims == nil {
					cp.leavingVictims = map[types.UID]bool{}
				}
				cp.leavingVictims[v] = true
			}
			continue
		}
		h := c.hosts[uid]
		cp.pods = append(cp.pods, podCopy{uid: uid, namespace: ps.namespace, name: ps.name, state: ps.state, confirmed: ps.confirmed,
			terminating: ps.terminating, priority: ps.priority, perCard: ps.perCard, unattributed: ps.unattributed, milliCPU: h.milliCPU, memMiB: h.memMiB})
	}
	// Map order: sort for plans that do not depend on it.
	slices.SortFunc(cp.pods, func(a, b podCopy) int { return cmp.Compare(a.uid, b.uid) })
	return cp, true
}

// PlanPreemption looks, on nodes in order, for the pods of lower priority
// than pod whose eviction lets pod fit, and returns the best such plan,
// nil when there is none. On each node it tries each card: the eligible
// pods holding memory there (see below) are all taken away, and if pod
// then fits (cards, and CPU and memory when the node reports them), they
// are given back one at a time, most important first (the highest
// priority, then the longest running), each kept where pod still fits, as
// kube-scheduler's preemption does with whole nodes; the ones that cannot
// be kept are the card's victims. A pod whose demand spans cards and fits
// no single card's plan is tried the same way over the node's pods at once.
// Of all plans, the best evicts pods of the lowest highest priority, then
// of the lowest priorities summed, then the fewest, then the youngest
// (kube-scheduler's order of candidate nodes); the first in nodes' order
// wins a tie.
//
// A pod may be evicted when it is bound and confirmed by the informer,
// holds memory on known cards, has a lower priority than pod, is not
// terminating, and every PodDisruptionBudget that covers it allows one more
// disruption; the victims of one plan together exceed no budget. Pods
// already terminating, and the victims of other reservations, count as
// gone; reserved room (Reserve) counts as taken. A plan may so have no
// victims at all: pod fits once pods already leaving have gone.
//
// It returns an error, naming the pod, when pod may not preempt (asks no
// gpu-mem, invalid card annotations) or ctx ends.
func (c *Cache) PlanPreemption(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string, vs Victims) (*Plan, error) {
	return c.PlanPreemptionAfter(ctx, pod, nodes, nil, vs)
}

// PlanPreemptionAfter is PlanPreemption where, on each node, the pods
// leaving[node] names by UID go anyway: kube-scheduler's own victims there,
// which it evicts for resources other than cards. Those that hold no card
// memory count as gone (their CPU and memory free) and the plan awaits
// them (Plan.Awaited); those that do are the plan's to choose or keep,
// by card, as any other.
func (c *Cache) PlanPreemptionAfter(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string, leaving map[string][]types.UID, vs Victims) (*Plan, error) {
	if err := pod.Placeable(); err != nil {
		return nil, err
	}
	b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
	var best *Plan
	var bestKey planKey
	for i, name := range nodes {
		// A plan copies each node and may ask about each of its pods:
		// look at ctx before every node.
		if err := stopped(ctx, pod, i, len(nodes)); err != nil {
			return nil, err
		}
		cp, ok := c.copyNode(name, leaving[name], pod.MPSUser)
		if !ok {
			continue
		}
		p, key, _ := planNode(cp, pod, vs, b)
		if p != nil && (best == nil || key.less(bestKey)) {
			best, bestKey = p, key
			if len(p.Victims) == 0 {
				break // nothing beats evicting no one
			}
		}
	}
	if err := stopped(ctx, pod, len(nodes), len(nodes)); err != nil {
		return nil, err
	}
	return best, nil
}

// candidate is a pod a plan may evict.
type candidate struct {
	pod *podCopy
	v   Victim
}

// planNode returns the best plan for pod on cp, nil when there is none;
// fitsNow says pod's demand fits cp's cards as they are (there is then no
// plan: evicting GPU pods is not what the pod needs there).
func planNode(cp *nodeCopy, pod *kubeinfo.PodInfo, vs Victims, b *allocator.Budget) (plan *Plan, key planKey, fitsNow bool) {
	fit := func(n *allocator.Node, pl *allocator.Placement) bool {
		return fitReason(n, cp.source, cp.invErr, pod, allocator.Binpack{}, pl, b) == ""
	}
	var pl allocator.Placement
	if fit(&cp.node, &pl) {
		return nil, planKey{}, true
	}
	view := cp.node
	view.Cards = slices.Clone(cp.node.Cards)
	freeCPU, freeMem := cp.freeMilliCPU, cp.freeMemMiB
	var cands []candidate
	for i := range cp.pods {
		pc := &cp.pods[i]
		if cp.leavingVictims[pc.uid] || pc.terminating {
			// Leaving already: its room will come free.
			take(&view, pc.perCard, 1)
			freeCPU, freeMem = freeCPU+pc.milliCPU, freeMem+pc.memMiB
			continue
		}
		// The cache's own facts first: only then ask about the pod.
		if pc.priority >= pod.Priority || pc.state != StateBound || !pc.confirmed || pc.unattributed > 0 || len(pc.perCard) == 0 {
			continue
		}
		v, ok := vs.Victim(pc.namespace, pc.name, pc.uid)
		if !ok || v.Terminating || !evictable(v, vs) {
			continue
		}
		v.Priority = pc.priority
		cands = append(cands, candidate{pod: pc, v: v})
	}
	host := hostRoom{known: cp.hostKnown, freeCPU: freeCPU, freeMem: freeMem, podCPU: pod.MilliCPU, podMem: pod.MemoryMiB}
	if fit(&view, &pl) && host.fits(0, 0) {
		return planOf(cp, pod, nil, &view, &pl), planKey{}, false
	}
	var best *Plan
	var bestKey planKey
	consider := func(group []candidate) {
		victims, ok := reprieve(&view, group, host, fit, vs)
		if !ok {
			return
		}
		key := keyOf(victims)
		if best != nil && !key.less(bestKey) {
			return
		}
		after := view
		after.Cards = slices.Clone(view.Cards)
		for _, v := range victims {
			take(&after, v.pod.perCard, 1)
		}
		if !fit(&after, &pl) {
			return // cannot happen: reprieve checked it
		}
		best, bestKey = planOf(cp, pod, victims, &after, &pl), key
	}
	for i := range view.Cards {
		idx := view.Cards[i].Index
		var group []candidate
		for _, cd := range cands {
			if cd.pod.perCard.Get(idx) > 0 {
				group = append(group, cd)
			}
		}
		if len(group) > 0 {
			consider(group)
		}
	}
	if best == nil && len(cands) > 0 && allocator.Searches(pod.Demand) {
		consider(cands) // a demand over several cards: any pods of the node
	}
	return best, bestKey, false
}

// evictable reports whether the Eviction API would let v go now: no more
// than one budget covers it, and that one allows a disruption.
func evictable(v Victim, vs Victims) bool {
	switch len(v.Budgets) {
	case 0:
		return true
	case 1:
		return vs.Allowed(v.Budgets[0]) > 0
	}
	return false
}

// hostRoom is the CPU (millicores) and memory (MiB) free on a node once the
// pods already leaving have gone, and what the preempting pod asks.
type hostRoom struct {
	known                            bool
	freeCPU, freeMem, podCPU, podMem int64
}

// fits reports whether the pod's CPU and memory fit once pods holding cpu
// and mem more have gone too; always on a node that reports no CPU.
func (h hostRoom) fits(cpu, mem int64) bool {
	return !h.known || h.freeCPU+cpu >= h.podCPU && h.freeMem+mem >= h.podMem
}

// reprieve takes every pod of group off view; if the preempting pod then
// fits (fit, and host), it gives them back one at a time, those covered by
// a PodDisruptionBudget first, each part most important first, and keeps
// each where the pod still fits. It returns the pods it could not give
// back, most important first, and false when the pod does not fit even
// without the whole group or the victims together exceed a budget. view is
// left as it was.
func reprieve(view *allocator.Node, group []candidate, host hostRoom, fit func(*allocator.Node, *allocator.Placement) bool, vs Victims) ([]candidate, bool) {
	n := *view
	n.Cards = slices.Clone(view.Cards)
	var cpu, mem int64
	for _, cd := range group {
		take(&n, cd.pod.perCard, 1)
		cpu, mem = cpu+cd.pod.milliCPU, mem+cd.pod.memMiB
	}
	var pl allocator.Placement
	if !fit(&n, &pl) || !host.fits(cpu, mem) {
		return nil, false
	}
	order := slices.Clone(group)
	slices.SortStableFunc(order, func(a, b candidate) int {
		return cmp.Or(
			-cmp.Compare(min(len(a.v.Budgets), 1), min(len(b.v.Budgets), 1)),
			-cmp.Compare(a.v.Priority, b.v.Priority),
			a.v.StartTime.Compare(b.v.StartTime))
	})
	var victims []candidate
	for _, cd := range order {
		take(&n, cd.pod.perCard, -1)
		if fit(&n, &pl) && host.fits(cpu-cd.pod.milliCPU, mem-cd.pod.memMiB) {
			cpu, mem = cpu-cd.pod.milliCPU, mem-cd.pod.memMiB
			continue
		}
		take(&n, cd.pod.perCard, 1)
		victims = append(victims, cd)
	}
	used := map[string]int32{}
	for _, v := range victims {
		for _, bud := range v.v.Budgets {
			if used[bud]++; used[bud] > vs.Allowed(bud) {
				return nil, false
			}
		}
	}
	return victims, true
}

// take removes (sign 1) or gives back (sign −1) the units perCard holds
// on n's cards.
func take(n *allocator.Node, perCard allocator.CardUnits, sign int64) {
	for i := range n.Cards {
		n.Cards[i].Used -= sign * perCard.Get(n.Cards[i].Index)
	}
}

// planOf builds the plan evicting victims on cp, pod placed by pl on after
// (cp's cards without the victims and the pods leaving).
func planOf(cp *nodeCopy, pod *kubeinfo.PodInfo, victims []candidate, after *allocator.Node, pl *allocator.Placement) *Plan {
	p := &Plan{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Node: cp.node.Name, Units: map[int]int64{},
		Awaited: cp.awaited, milliCPU: pod.MilliCPU, memMiB: pod.MemoryMiB, gen: cp.gen}
	for pos, u := range pl.Reserved {
		if u > 0 {
			p.Units[after.Cards[pos].Index] = u
		}
	}
	for _, v := range victims {
		units := v.pod.perCard.Total()
		p.Victims = append(p.Victims, PlannedVictim{Namespace: v.pod.namespace, Name: v.pod.name, UID: v.pod.uid,
			Priority: v.v.Priority, Units: units, Budgets: v.v.Budgets})
		p.GraceSeconds = max(p.GraceSeconds, v.v.GraceSeconds)
	}
	return p
}

// planKey orders plans as kube-scheduler orders preemption candidates
// (pickOneNodeForPreemption): a lower highest victim priority, then a
// lower sum of priorities, then fewer victims, then a later earliest start
// among the highest-priority victims. A plan without victims beats all.
type planKey struct {
	victims  int
	highest  int64
	sum      int64
	earliest time.Time
}

func keyOf(victims []candidate) planKey {
	k := planKey{victims: len(victims), highest: math.MinInt64}
	for _, v := range victims {
		p := int64(v.v.Priority)
		k.sum += p + math.MaxInt32 + 1
		switch {
		case p > k.highest:
			k.highest, k.earliest = p, v.v.StartTime
		case p == k.highest && v.v.StartTime.Before(k.earliest):
			k.earliest = v.v.StartTime
		}
	}
	return k
}

// less reports whether k is a better plan than o.
func (k planKey) less(o planKey) bool {
	if k.victims == 0 || o.victims == 0 {
		return k.victims == 0 && o.victims != 0
	}
	return cmp.Or(cmp.Compare(k.highest, o.highest), cmp.Compare(k.sum, o.sum), cmp.Compare(k.victims, o.victims),
		-k.earliest.Compare(o.earliest)) < 0
}

// FitsOutside returns a node not among nodes where pod could run now, and
// whether there is one (or may be: a search its budget or ctx ended, the
// node then ""). Such a node has cards that fit the pod's demand as they
// are, room for its CPU and memory (where the node reports them), and
// passes usable, which stands for kube-scheduler's other filters (cordon,
// taints, node selector and affinity); a nil usable passes every node.
// kube-scheduler sends the extender only the first nodes that pass its own
// filters in a large cluster (percentageOfNodesToScore): a pod that fits
// none of those may fit one it did not send, and then nobody should be
// evicted for it. It reads the published copies and takes no lock.
func (c *Cache) FitsOutside(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string, usable func(node string) bool) (string, bool) {
	if pod.Placeable() != nil {
		return "", false
	}
	sent := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		sent[n] = true
	}
	b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
	cr := c.creditFor(pod.UID)
	var pl allocator.Placement
	x := c.index.Load()
	for _, m := range []map[string]*nodeSlot{x.base, x.recent} {
		for name := range m {
			if sent[name] || b.Err() != nil {
				continue
			}
			s, _ := c.fitSnap(name, pod, cr, allocator.Binpack{}, &pl, b)
			if s == nil || s.hostKnown && (s.freeMilliCPU < pod.MilliCPU || s.freeMemMiB < pod.MemoryMiB) {
				continue
			}
			if usable == nil || usable(name) {
				return name, true
			}
		}
	}
	// A search the budget cut short may have missed a fit: say so.
	return "", b.Err() != nil
}
