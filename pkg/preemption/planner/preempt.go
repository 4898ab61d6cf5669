package planner

import (
	"cmp"
	"math"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// Victim is what a preemption needs to know of a pod it might evict
// (Victims.Victim).
type Victim struct {
	Priority int32
	// StartTime breaks ties of priority: of two pods, the one started later is
	// evicted first (kube-scheduler's MoreImportantPod).
	StartTime time.Time
	// Terminating: the pod is leaving already. Its memory counts as free, and
	// it is never evicted again.
	Terminating bool
	// GraceSeconds is its termination grace period. The reservation lasts at
	// least that long beyond cache.Cache.Reserve's TTL.
	GraceSeconds int64
	// Budgets names the PodDisruptionBudgets the Eviction API checks
	// before it evicts the pod. It refuses a pod that more than one
	// covers, so such a pod is never a victim.
	Budgets []string
}

// Victims describes, to the planner, the pods charged on a node. The
// planner asks only about pods of a lower priority than the preemptor's,
// and only about those it may evict.
type Victims interface {
	// Victim describes pod namespace/name with UID uid. ok is false when the
	// pod is unknown; it then stays, as if it could not be evicted.
	Victim(namespace, name string, uid types.UID) (v Victim, ok bool)
	// Allowed returns how many more pods PodDisruptionBudget budget lets go
	// now: its status.disruptionsAllowed, 0 when unknown.
	Allowed(budget string) int32
}

// Plan is a preemption the planner found: the pods to evict on one node
// so that a pod fits there, and the room it would take.
type Plan struct {
	// Namespace, Name and UID of the pod the room is for.
	Namespace, Name string
	UID             types.UID
	Node            string
	// Victims to evict, most important first. There are none when the pods
	// already terminating there free enough.
	Victims []PlannedVictim
	// Units is what the pod would hold, card index -> units (the node's
	// unit), where the demand fits once the victims and the pods already
	// terminating have gone.
	Units map[int]int64
	// GraceSeconds is the longest grace period among the victims.
	GraceSeconds int64
	// Awaited are the UIDs of the pods besides Victims that are to leave the
	// node for the pod. They are kube-scheduler's own victims, which it evicts.
	// Either it preempts for other resources while the cards are held (Hold),
	// or they are those of its victims that hold no card memory
	// (cache.Cache.PlanPreemptionAfter).
	Awaited []types.UID
	// MilliCPU and MemoryMiB are what the pod requests. Gen is the node's
	// generation the plan was made at (Node.Gen).
	MilliCPU, MemoryMiB int64
	Gen                 uint64
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

// Node is what a preemption reads of one node, copied under the cache's
// lock: its cards and the pods charged on them. The cards the preempting
// pod may not join are marked ForeignMPS.
type Node struct {
	allocator.Node
	// Gen is the node's generation the copy was made at (Plan.Gen).
	Gen uint64
	// HostKnown: the node reports its CPU. FreeMilliCPU and FreeMemMiB are
	// then its free CPU (millicores) and memory (MiB), counting Awaited's as
	// free.
	HostKnown                bool
	FreeMilliCPU, FreeMemMiB int64
	// Pods are those charged on the cards, reserved room aside, by UID.
	Pods []Pod
	// Leaving: the victims of the node's reservations.
	Leaving map[types.UID]bool
	// Awaited are the pods that ask no GPU memory and leave the node anyway
	// (cache.Cache.PlanPreemptionAfter). Their CPU and memory count as free.
	Awaited []types.UID
}

// Pod is one pod charged on a Node.
type Pod struct {
	UID             types.UID
	Namespace, Name string
	// Settled: the pod is bound and the informer has shown it so.
	Settled     bool
	Terminating bool
	Priority    int32
	// PerCard is what it holds on the cards, shared with the cache's entry.
	// Unattributed is what it holds on unknown cards.
	PerCard      allocator.CardUnits
	Unattributed int64
	// MilliCPU and MemoryMiB are what it requests on the node.
	MilliCPU, MemoryMiB int64
}

// candidate is a pod a plan may evict.
type candidate struct {
	pod *Pod
	v   Victim
}

// Best returns the best plan for pod on cp, nil when there is none. fit
// places the pod's demand on a node's cards into pl and says whether it
// fits. fitsNow says the demand fits cp's cards as they are. There is then
// no plan: evicting GPU pods is not what the pod needs there.
func Best(cp *Node, pod *kubeinfo.PodInfo, vs Victims, fit func(n *allocator.Node, pl *allocator.Placement) bool) (plan *Plan, key Key, fitsNow bool) {
	var pl allocator.Placement
	if fit(&cp.Node, &pl) {
		return nil, Key{}, true
	}
	view := cp.Node
	view.Cards = slices.Clone(cp.Cards)
	freeCPU, freeMem := cp.FreeMilliCPU, cp.FreeMemMiB
	var cands []candidate
	for i := range cp.Pods {
		pc := &cp.Pods[i]
		if cp.Leaving[pc.UID] || pc.Terminating {
			// Leaving already: its room will come free.
			take(&view, pc.PerCard, 1)
			freeCPU, freeMem = freeCPU+pc.MilliCPU, freeMem+pc.MemoryMiB
			continue
		}
		// The cache's own facts first: only then ask about the pod.
		if pc.Priority >= pod.Priority || !pc.Settled || pc.Unattributed > 0 || len(pc.PerCard) == 0 {
			continue
		}
		v, ok := vs.Victim(pc.Namespace, pc.Name, pc.UID)
		if !ok || v.Terminating || !evictable(v, vs) {
			continue
		}
		v.Priority = pc.Priority
		cands = append(cands, candidate{pod: pc, v: v})
	}
	host := hostRoom{known: cp.HostKnown, freeCPU: freeCPU, freeMem: freeMem, podCPU: pod.MilliCPU, podMem: pod.MemoryMiB}
	if fit(&view, &pl) && host.fits(0, 0) {
		return planOf(cp, pod, nil, &view, &pl), Key{}, false
	}
	var best *Plan
	var bestKey Key
	consider := func(group []candidate) {
		victims, ok := reprieve(&view, group, host, fit, vs)
		if !ok {
			return
		}
		key := keyOf(victims)
		if best != nil && !key.Less(bestKey) {
			return
		}
		after := view
		after.Cards = slices.Clone(view.Cards)
		for _, v := range victims {
			take(&after, v.pod.PerCard, 1)
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
			if cd.pod.PerCard.Get(idx) > 0 {
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

// hostRoom is the CPU (millicores) and memory (MiB) free on a node once
// the pods already leaving have gone, and what the preempting pod asks.
type hostRoom struct {
	known                            bool
	freeCPU, freeMem, podCPU, podMem int64
}

// fits reports whether the pod's CPU and memory fit once pods holding cpu
// and mem more have gone too. It is always true on a node that reports no
// CPU.
func (h hostRoom) fits(cpu, mem int64) bool {
	return !h.known || h.freeCPU+cpu >= h.podCPU && h.freeMem+mem >= h.podMem
}

// reprieve takes every pod of group off view. If the preempting pod then
// fits (fit, and host), it gives them back one at a time and keeps each
// where the pod still fits. The pods a PodDisruptionBudget covers go first,
// and each part most important first. It returns the pods it could not give
// back, most important first. It returns false when the pod does not fit
// even without the whole group, or the victims together exceed a budget.
// view is left as it was.
func reprieve(view *allocator.Node, group []candidate, host hostRoom, fit func(*allocator.Node, *allocator.Placement) bool, vs Victims) ([]candidate, bool) {
	n := *view
	n.Cards = slices.Clone(view.Cards)
	var cpu, mem int64
	for _, cd := range group {
		take(&n, cd.pod.PerCard, 1)
		cpu, mem = cpu+cd.pod.MilliCPU, mem+cd.pod.MemoryMiB
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
		take(&n, cd.pod.PerCard, -1)
		if fit(&n, &pl) && host.fits(cpu-cd.pod.MilliCPU, mem-cd.pod.MemoryMiB) {
			cpu, mem = cpu-cd.pod.MilliCPU, mem-cd.pod.MemoryMiB
			continue
		}
		take(&n, cd.pod.PerCard, 1)
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

// Hold returns the plan without victims for pod on cp, placed by pl on
// cp's cards as they are.
func Hold(cp *Node, pod *kubeinfo.PodInfo, pl *allocator.Placement) *Plan {
	return planOf(cp, pod, nil, &cp.Node, pl)
}

// planOf builds the plan evicting victims on cp. pl placed the pod on
// after, cp's cards without the victims and the pods leaving.
func planOf(cp *Node, pod *kubeinfo.PodInfo, victims []candidate, after *allocator.Node, pl *allocator.Placement) *Plan {
	p := &Plan{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, Node: cp.Name, Units: map[int]int64{},
		Awaited: cp.Awaited, MilliCPU: pod.MilliCPU, MemoryMiB: pod.MemoryMiB, Gen: cp.Gen}
	for pos, u := range pl.Reserved {
		if u > 0 {
			p.Units[after.Cards[pos].Index] = u
		}
	}
	for _, v := range victims {
		units := v.pod.PerCard.Total()
		p.Victims = append(p.Victims, PlannedVictim{Namespace: v.pod.Namespace, Name: v.pod.Name, UID: v.pod.UID,
			Priority: v.v.Priority, Units: units, Budgets: v.v.Budgets})
		p.GraceSeconds = max(p.GraceSeconds, v.v.GraceSeconds)
	}
	return p
}

// Key orders plans as kube-scheduler orders preemption candidates
// (pickOneNodeForPreemption). The better plan has a lower highest victim
// priority, then a lower sum of priorities, then fewer victims, then a
// later earliest start among the highest-priority victims. A plan without
// victims beats all.
type Key struct {
	victims  int
	highest  int64
	sum      int64
	earliest time.Time
}

func keyOf(victims []candidate) Key {
	k := Key{victims: len(victims), highest: math.MinInt64}
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

// Less reports whether k is a better plan than o.
func (k Key) Less(o Key) bool {
	if k.victims == 0 || o.victims == 0 {
		return k.victims == 0 && o.victims != 0
	}
	return cmp.Or(cmp.Compare(k.highest, o.highest), cmp.Compare(k.sum, o.sum), cmp.Compare(k.victims, o.victims),
		-k.earliest.Compare(o.earliest)) < 0
}
