package cache

import (
	"fmt"
	"math"
	"reflect"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// charge adds (sign 1) or removes (sign -1) what ps holds on the cards.
func (ns *nodeState) charge(ps *podState, sign int64) {
	for _, cu := range ps.perCard {
		pos := ns.position(cu.Index)
		if pos < 0 {
			ns.missing += sign * cu.Units
			continue
		}
		ns.node.Cards[pos].Used += sign * cu.Units
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

// add records ps under uid and charges its node. For an entry that is not
// ours it first resolves what the entry is charged. The caller holds c.mu
// and has removed any previous entry for uid.
func (c *Cache) add(uid types.UID, ps *podState) {
	c.pods[uid] = ps
	if ps.state != StateReserved {
		c.priorities[ps.priority]++
	}
	ns := c.nodeState(ps.node)
	if !ps.ours {
		ns.resolve(ps)
	}
	ns.pods[uid] = struct{}{}
	c.touch(ns)
	c.holes.AddNode(&ns.node, -1)
	ns.charge(ps, 1)
	c.holes.AddNode(&ns.node, 1)
}

// remove drops uid's entry, if any, and uncharges its node. If the entry
// was only assumed, it also drops the CPU and memory held for it. The
// caller holds c.mu.
func (c *Cache) remove(uid types.UID) {
	ps, ok := c.pods[uid]
	if !ok {
		return
	}
	delete(c.pods, uid)
	switch ps.state {
	case StateReserved:
		c.reservations.Add(-1)
	case StateAssumed:
		c.view.Unpin(uid)
	}
	if ps.state != StateReserved {
		if c.priorities[ps.priority]--; c.priorities[ps.priority] <= 0 {
			delete(c.priorities, ps.priority)
		}
	}
	if h, ok := c.hosts[uid]; ok && h.assumed {
		c.dropHost(uid)
	}
	if ns, ok := c.nodes[ps.node]; ok {
		delete(ns.pods, uid)
		c.touch(ns)
		c.holes.AddNode(&ns.node, -1)
		ns.charge(ps, -1)
		c.holes.AddNode(&ns.node, 1)
	}
}

// UpsertPod applies a pod add or update.
func (c *Cache) UpsertPod(pod *corev1.Pod) { c.UpsertPodInfo(kubeinfo.NewPodInfo(pod)) }

// UpsertPodInfo applies a pod add or update from the informer.
func (c *Cache) UpsertPodInfo(pod *kubeinfo.PodInfo) {
	c.report(c.locked(func() []inspectapi.Ignored {
		if c.stale(pod) {
			return nil
		}
		return c.upsert(pod, true)
	}))
}

// upsert applies pod's GPU memory and publishes the change. With host (a
// pod, not a claim) it also applies the pod's host requests. It returns the
// pod's allocation annotation when it newly becomes ignored; the caller
// reports it once c.mu is released. The caller holds c.mu.
func (c *Cache) upsert(pod *kubeinfo.PodInfo, host bool) []inspectapi.Ignored {
	was := c.ignoredReason(pod.UID)
	c.upsertGPU(pod)
	if host {
		c.syncHost(pod)
		c.observeCPUOnly(pod)
	}
	now := c.ignoredReason(pod.UID)
	c.publish()
	if now == "" || now == was {
		return nil
	}
	return []inspectapi.Ignored{{Namespace: pod.Namespace, Name: pod.Name, Reason: now}}
}

// ignoredReason says why uid's allocation annotation is ignored, "" if it
// is not. The caller holds c.mu.
func (c *Cache) ignoredReason(uid types.UID) string {
	if ps, ok := c.pods[uid]; ok {
		return ps.ignored()
	}
	return c.pendingIgnored[uid].reason
}

// upsertGPU applies a pod event to the pod's allocation. The package doc
// says which allocations are charged. The caller holds c.mu.
func (c *Cache) upsertGPU(pod *kubeinfo.PodInfo) {
	if pod.Demand == nil {
		// No gpu-mem, or an invalid request, which no node admits.
		c.forgetPod(pod.UID)
		return
	}
	if pod.NodeName != "" {
		c.observePlaced(pod)
	}
	if pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed {
		c.forgetPod(pod.UID)
		return
	}
	old := c.pods[pod.UID]
	if pod.NodeName == "" {
		// Pending: only our own Assume holds cards for it. A pending event
		// without annotation predates its Binding, and Forget releases a
		// failed Binding. An annotation here is someone else's.
		if pod.Allocation != nil || pod.AllocationErr != "" {
			node := ""
			if pod.Allocation != nil {
				node = pod.Allocation.Node
			}
			c.pendingIgnored[pod.UID] = ignoredPod{namespace: pod.Namespace, name: pod.Name, node: node,
				reason: fmt.Sprintf("pod is not bound yet but carries %s, which only the extender's bind writes (together with the node); it holds nothing", gpushare.AnnotationAllocation)}
		} else {
			delete(c.pendingIgnored, pod.UID)
		}
		if old != nil && !old.ours {
			c.remove(pod.UID) // cannot happen: pods are not unbound
		}
		return
	}
	delete(c.pendingIgnored, pod.UID)
	if old != nil && old.ours && old.node == pod.NodeName && pod.Allocation != nil && reflect.DeepEqual(old.alloc, pod.Allocation) {
		// Our bind's annotation coming back: confirmed.
		old.state, old.confirmed, old.deadline = StateBound, true, time.Time{}
		c.setTerminating(old, pod.Terminating)
		c.view.Unpin(pod.UID)
		return
	}
	ps := &podState{namespace: pod.Namespace, name: pod.Name, node: pod.NodeName, state: StateBound, confirmed: true, terminating: pod.Terminating, dra: pod.DRA,
		priority: pod.Priority, mpsUser: pod.MPSUser, claim: pod.Allocation, rare: newPodRare(pod.AllocationErr, nil), demand: pod.Demand, legacyIndex: int32(pod.LegacyIndex)} //nolint:gosec // G115: NewPodInfo keeps LegacyIndex within 32 bits
	if old != nil && !old.ours && old.sameInputs(ps) {
		// A status update: nothing the charge depends on changed.
		c.setTerminating(old, pod.Terminating)
		return
	}
	// Placed by us and changed since (the device plugin repaired it to the
	// cards kubelet gave), or placed by someone else: charge it again as
	// resolve says.
	c.remove(pod.UID)
	c.add(pod.UID, ps)
}

// setTerminating records whether ps's pod terminates. A change touches its
// node, so that a preemption sees it (Generation moves on). The caller
// holds c.mu.
func (c *Cache) setTerminating(ps *podState, terminating bool) {
	if ps.terminating == terminating {
		return
	}
	ps.terminating = terminating
	if ns, ok := c.nodes[ps.node]; ok {
		c.touch(ns)
	}
}

// sameInputs reports whether ps and o, two entries of one bound pod, would
// resolve alike.
func (ps *podState) sameInputs(o *podState) bool {
	return ps.node == o.node && ps.claimErr() == o.claimErr() && ps.legacyIndex == o.legacyIndex &&
		ps.demand.Total() == o.demand.Total() && reflect.DeepEqual(ps.claim, o.claim)
}

// resolve decides what ps, the informer's view of a bound pod on ns, is
// charged. That is its allocation annotation when accept takes it, else its
// request on the card its Aliyun index names, else its request
// unattributed. The caller holds the cache's lock.
func (ns *nodeState) resolve(ps *podState) {
	ps.alloc, ps.perCard, ps.unattributed = nil, nil, 0
	ps.setIgnored("")
	if ns.source == inspectapi.SourceDRA && !ps.dra {
		return // the driver's slice leaves out what the pod holds
	}
	if ps.claim != nil || ps.claimErr() != "" {
		a, reason := ns.accept(ps)
		if reason == "" {
			ps.alloc, ps.perCard = a, allocator.CardUnitsOf(a.PerCard())
			return
		}
		ps.setIgnored(reason)
	}
	if ps.legacyIndex >= 0 {
		ps.perCard = allocator.CardUnits{{Index: int(ps.legacyIndex), Units: ps.demand.Total()}}
	} else {
		ps.unattributed = ps.demand.Total()
	}
}

// accept returns ps's allocation annotation in the node's unit if it fits
// the pod's request and the node's cards, else why not. Until the node's
// own event arrives, its cards and unit are unknown and only the request
// is checked; SetNode resolves again.
func (ns *nodeState) accept(ps *podState) (*gpushare.Allocation, string) {
	if err := ps.claimErr(); err != "" {
		return nil, err
	}
	a := ps.claim
	if a.Node != ps.node {
		return nil, fmt.Sprintf("allocation names node %s; the pod runs on %s", a.Node, ps.node)
	}
	if ns.seen && a.Unit != ns.node.Unit {
		conv, err := a.InUnit(ns.node.Unit)
		if err != nil {
			return nil, err.Error()
		}
		if err := conv.CheckDemand(ps.demand); err != nil {
			return nil, fmt.Sprintf("allocation in %s does not fit the pod's request once converted to node %s's %s: %v", a.Unit, ns.node.Name, ns.node.Unit, err)
		}
		a = conv
	} else if err := a.CheckDemand(ps.demand); err != nil {
		return nil, err.Error()
	}
	if !ns.seen {
		return a, ""
	}
	// A card index the node does not report is charged to its missing
	// units, as for a node that lost a card under running pods.
	for _, c := range a.Containers {
		for _, d := range c.Devices {
			pos := ns.position(d.Index)
			if pos < 0 {
				continue
			}
			if uuid := ns.node.Cards[pos].UUID(); d.UUID != "" && uuid != "" && d.UUID != uuid {
				return nil, fmt.Sprintf("allocation names card %d as %s; node %s's card %d is %s", d.Index, d.UUID, ns.node.Name, d.Index, uuid)
			}
		}
	}
	for idx, u := range a.PerCard() {
		if pos := ns.position(idx); pos >= 0 && u > ns.node.Cards[pos].Total {
			return nil, fmt.Sprintf("allocation holds %d %s on card %d, which has %d %s", u, a.Unit, idx, ns.node.Cards[pos].Total, a.Unit)
		}
	}
	return a, ""
}

// observePlaced feeds the workload model, once per pod, a pod that asks GPU
// memory and was placed: bound to a node (the informer's view), or assumed
// by our bind. Pending pods teach it nothing. Anyone may create pods that
// never schedule, and they must not steer the policy. The caller holds
// c.mu.
func (c *Cache) observePlaced(pod *kubeinfo.PodInfo) {
	key := c.observedKey(pod.UID)
	if _, seen := c.observed[key]; seen {
		return
	}
	c.observed[key] = struct{}{}
	c.workload.ObserveConstrained(pod.Demand, pod.Models, pod.MilliCPU, pod.MemoryMiB)
	c.workloadDirty = true
}

// forgetPod drops everything uid holds on cards and what is known of its
// annotation. The caller holds c.mu.
func (c *Cache) forgetPod(uid types.UID) {
	c.remove(uid)
	delete(c.pendingIgnored, uid)
}

// UpsertClaim charges what a ResourceClaim of the gpushare DRA driver
// holds, as a bound pod keyed by the claim's UID. The fields of claim:
//   - NodeName: the node of the claim's allocation;
//   - Demand: one container of the memory asked on one card;
//   - Allocation: the card and memory allocated, in any unit. It is
//     converted to the node's unit and must fit its cards, as any
//     allocation annotation must;
//   - MilliCPU and MemoryMiB: its pod's requests.
//
// The workload model learns the claim as a GPU pod. Its pod
// (PodInfo.ClaimPod) asks no gpu-mem and is charged only its CPU and
// memory. DeleteClaim forgets a claim whose allocation is gone
// (deallocated). Claims are never preemption victims: the extender evicts
// pods for GPU memory only on the device plugin's nodes.
func (c *Cache) UpsertClaim(claim *kubeinfo.PodInfo) {
	claim.Priority, claim.PreemptNever, claim.DRA = math.MaxInt32, true, true
	c.report(c.locked(func() []inspectapi.Ignored { return c.upsert(claim, false) }))
}

// DeleteClaim forgets what the claim of UID uid held (UpsertClaim).
func (c *Cache) DeleteClaim(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	c.forgetPod(uid)
	delete(c.observed, c.observedKey(uid))
}

// DeletePod applies a pod delete from the informer.
func (c *Cache) DeletePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	c.forgetPod(uid)
	c.dropHost(uid)
	key := c.observedKey(uid)
	delete(c.observed, key)
	c.gone[key] = c.clock.Now()
	c.deleted(uid)
}
