package cache

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache/internal/view"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// Assume chooses cards for pod's Demand on node with the pod's policy (the
// default when it names none). It holds them, and the pod's CPU and memory,
// as assumed until FinishBinding, Forget or the deadline. It is idempotent:
// for a pod that already holds an allocation on node it returns that
// allocation and holds nothing more. Its errors:
//   - ErrBoundElsewhere: the pod is bound to another node;
//   - ErrBindInFlight: the pod's bind to another node has not ended, or
//     ended with an unknown outcome;
//   - ErrPodGone: the informer has delivered the pod's delete;
//   - ErrUnknownNode: the extender has not seen node;
//   - *allocator.FitError: the pod does not fit, with filter's reason for a
//     node without GPUs.
//
// The search runs on the node's published copy without the lock, within a
// request budget that ends with ctx. The choice is held only if the node
// has not changed meanwhile. Otherwise the search runs again, at most
// optimisticTries times, then under the lock, within the same budget. So a
// bind's search never holds the lock that informer events and other binds
// take.
func (c *Cache) Assume(ctx context.Context, pod *kubeinfo.PodInfo, node string) (*gpushare.Allocation, error) {
	if err := pod.Placeable(); err != nil {
		return nil, err
	}
	b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
	pl := &allocator.Placement{}
	for range optimisticTries {
		t, done, err := c.beginOptimistic(pod, node)
		if done != nil || err != nil {
			return done, err
		}
		reason := view.FitReason(&t.snap.Node, t.snap.Source, t.snap.InvErr, pod, t.p, pl, b)
		if alloc, again, err := c.holdIfUnchanged(pod, node, t.gen, pl, reason); !again {
			return alloc, err
		}
	}
	return c.assumeLocked(pod, node, pl, b)
}

// attempt is what a try of Assume reads under c.mu before it searches.
type attempt struct {
	// ns is the node's state, read only under c.mu; gen is its generation
	// when the try began.
	ns  *nodeState
	gen uint64
	// p is the pod's policy. cr is the room reserved for the pod (preempt.go),
	// which is free to it.
	p  allocator.Policy
	cr *view.Credit
	// snap is the node's published copy as the pod sees it, made at gen. Only
	// optimistic tries set it.
	snap *view.Snap
}

// begin begins a try of Assume. done and err are assumable's, or the error
// of the pod's policy. The caller holds c.mu.
func (c *Cache) begin(pod *kubeinfo.PodInfo, node string) (t attempt, done *gpushare.Allocation, err error) {
	if t.ns, done, err = c.assumable(pod, node); done != nil || err != nil {
		return attempt{}, done, err
	}
	if t.p, err = c.view.Inputs().Policy(pod.Policy, pod.Models); err != nil {
		return attempt{}, nil, err
	}
	t.gen, t.cr = t.ns.gen, c.creditLocked(pod.GetUID())
	return t, nil, nil
}

// beginOptimistic begins one of Assume's optimistic tries. Under c.mu it
// reads the node's published copy, which the search then reads without it.
func (c *Cache) beginOptimistic(pod *kubeinfo.PodInfo, node string) (t attempt, done *gpushare.Allocation, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, done, err = c.begin(pod, node); done != nil || err != nil {
		return t, done, err
	}
	t.snap = t.cr.On(c.view.Snap(node)).ForMPS(pod.MPSUser) // published before the lock is released: snap.gen == gen
	return t, nil, nil
}

// holdIfUnchanged ends an optimistic try of Assume under c.mu. If node is
// still at gen, it holds pl, found on the copy of that generation; a
// non-empty reason says the pod does not fit there. again is true when the
// node moved on, and the search must run again.
func (c *Cache) holdIfUnchanged(pod *kubeinfo.PodInfo, node string, gen uint64, pl *allocator.Placement, reason string) (alloc *gpushare.Allocation, again bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, done, err := c.assumable(pod, node)
	switch {
	case done != nil || err != nil:
		return done, false, err
	case ns.gen != gen:
		// The node changed under the search. So did the pod's reserved room
		// there, if any: Reserve and its release touch the node.
		return nil, true, nil
	}
	alloc, err = c.hold(pod, ns, pl, reason)
	return alloc, false, err
}

// assumeLocked is Assume's last try, which searches under c.mu.
func (c *Cache) assumeLocked(pod *kubeinfo.PodInfo, node string, pl *allocator.Placement, b *allocator.Budget) (*gpushare.Allocation, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, done, err := c.begin(pod, node)
	if done != nil || err != nil {
		return done, err
	}
	ns := t.ns
	reason := view.FitReason(view.WithForeignMPS(t.cr.OnNode(&ns.node), ns.mpsUsers(c.pods), pod.MPSUser), ns.source, ns.invErr, pod, t.p, pl, b)
	return c.hold(pod, ns, pl, reason)
}

// optimisticTries is how many times Assume searches a node's published
// copy before it searches under the lock. A node changes between two tries
// only when an informer event or another bind hits that very node.
const optimisticTries = 3

// assumable returns node's state if pod may be placed there now. done is
// the allocation the pod already holds there (Assume is idempotent), and
// err says why it may not. The caller holds c.mu.
func (c *Cache) assumable(pod *kubeinfo.PodInfo, node string) (ns *nodeState, done *gpushare.Allocation, err error) {
	if _, ok := c.gone[c.observedKey(pod.GetUID())]; ok {
		return nil, nil, fmt.Errorf("pod %s/%s (UID %s): %w", pod.GetNamespace(), pod.GetName(), pod.GetUID(), ErrPodGone)
	}
	if ps, ok := c.pods[pod.GetUID()]; ok && ps.state != StateReserved {
		switch {
		case ps.node == node && ps.alloc != nil:
			return nil, ps.alloc, nil
		case ps.state == StateBound:
			return nil, nil, fmt.Errorf("pod %s/%s is on node %s, not %s: %w", pod.GetNamespace(), pod.GetName(), ps.node, node, ErrBoundElsewhere)
		default:
			// Our own assumption for another node. Its Binding may still be
			// made: the scheduler gave up waiting, or its answer was lost.
			// Releasing it now could hand its cards out twice.
			return nil, nil, fmt.Errorf("pod %s/%s: a bind to node %s has not ended or its outcome is unknown; its cards stay held until the API shows the pod or %s passes: %w",
				pod.GetNamespace(), pod.GetName(), ps.node, ps.deadline.Sub(c.clock.Now()).Round(time.Second), ErrBindInFlight)
		}
	}
	ns, reason, unknown := c.gpuNode(node)
	switch {
	case unknown:
		return nil, nil, fmt.Errorf("node %s: %w", node, ErrUnknownNode)
	case ns == nil:
		return nil, nil, &allocator.FitError{Node: node, Reason: reason}
	}
	return ns, nil, nil
}

// hold records pl as pod's assumed allocation, with its CPU and memory,
// and publishes the change. pl was placed on ns's cards as they are now,
// less the pod's reserved room, which the allocation replaces. A non-empty
// reason says the pod does not fit instead. The caller holds c.mu.
func (c *Cache) hold(pod *kubeinfo.PodInfo, ns *nodeState, pl *allocator.Placement, reason string) (*gpushare.Allocation, error) {
	if reason != "" {
		return nil, &allocator.FitError{Node: ns.node.Name, Reason: reason}
	}
	uid := pod.GetUID()
	if ps, ok := c.pods[uid]; ok && ps.state == StateReserved {
		c.remove(uid) // the reservation, on this node or another
	}
	alloc := allocator.Allocation(&ns.node, pod.Demand, pl)
	c.add(uid, &podState{namespace: pod.GetNamespace(), name: pod.GetName(), node: ns.node.Name, state: StateAssumed, ours: true,
		priority: pod.Priority, mpsUser: pod.MPSUser, alloc: alloc, perCard: allocator.CardUnitsOf(alloc.PerCard()), deadline: c.clock.Now().Add(c.assumeTTL)})
	c.view.Pin(uid, ns.node.Name)
	if h, ok := c.hosts[uid]; !ok || h.assumed {
		c.setHost(uid, ns.node.Name, pod.MilliCPU, pod.MemoryMiB, true)
	}
	c.observePlaced(pod)
	c.publish()
	return alloc, nil
}

// FinishBinding marks uid's assumed allocation bound: its Binding was
// made. It keeps a deadline until the informer shows the pod bound, so a
// pod the informer never delivers is released then.
func (c *Cache) FinishBinding(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.view.Unpin(uid)
	if ps, ok := c.pods[uid]; ok {
		ps.state = StateBound
		ps.deadline = time.Time{}
		if !ps.confirmed {
			ps.deadline = c.clock.Now().Add(c.assumeTTL)
		}
		if h, ok := c.hosts[uid]; ok && h.assumed {
			h.assumed = false
			c.hosts[uid] = h
		}
	}
}

// Forget releases uid's allocation if it is still only assumed: its bind
// failed and no Binding was made.
func (c *Cache) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	if ps, ok := c.pods[uid]; ok && ps.state == StateAssumed {
		c.remove(uid)
	}
}

// Expired names a released allocation.
type Expired struct {
	Namespace, Name, Node string
	// Bound: its Binding was made, but the informer never showed the pod; it
	// was deleted before the watch delivered it. Otherwise the bind never
	// completed.
	Bound bool
	// Reserved: room a preemption kept for the pod (Reserve), which was not
	// bound in time.
	Reserved bool
}

// Expire releases, and returns, the assumed allocations and reserved room
// past their deadline, and the bound allocations the informer has not
// confirmed by theirs. It also forgets the deletes older than AssumeTTL.
func (c *Cache) Expire() []Expired {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	for key, at := range c.gone {
		if now.Sub(at) > c.assumeTTL {
			delete(c.gone, key)
		}
	}
	var out []Expired
	for uid, ps := range c.pods {
		if ps.deadline.IsZero() || !now.After(ps.deadline) || ps.confirmed {
			continue
		}
		if ps.state == StateReserved && c.awaiting(ps, now) {
			continue
		}
		out = append(out, Expired{Namespace: ps.namespace, Name: ps.name, Node: ps.node, Bound: ps.state == StateBound, Reserved: ps.state == StateReserved})
		c.remove(uid)
		c.dropHost(uid)
	}
	return out
}

// awaiting reports whether reservation ps, past its deadline at now, still
// waits for a victim. A victim is awaited while it holds its node and the
// limit is not reached. The deadline then moves a TTL on, never past the
// limit. The caller holds c.mu.
func (c *Cache) awaiting(ps *podState, now time.Time) bool {
	if ps.rare == nil || !now.Before(ps.rare.limit) {
		return false
	}
	for _, v := range ps.rare.victims {
		if _, ok := c.hosts[v]; ok {
			ps.deadline = now.Add(c.assumeTTL)
			if ps.deadline.After(ps.rare.limit) {
				ps.deadline = ps.rare.limit
			}
			return true
		}
	}
	return false
}
