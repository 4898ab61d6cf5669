package cache

import (
	"errors"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// nodeSnap is what the verbs that only read (filter, prioritize, and the
// search of a bind) need of one node: a copy the cache makes under its lock
// each time the node changes (publish) and never modifies after, so they
// read it without the lock and never wait behind informer events or binds.
type nodeSnap struct {
	// node holds a copy of the cards.
	node   allocator.Node
	source string // SourceInventory, SourceCapacity, SourceDRA or SourceNone
	// invErr and cordonErr as in nodeState.
	invErr, cordonErr string
	// hostKnown: the node reports its CPU; freeMilliCPU and freeMemMiB are
	// then its allocatable CPU (millicores) and memory (MiB) less what the
	// pods on it request.
	hostKnown                bool
	freeMilliCPU, freeMemMiB int64
	// gen is the nodeState's generation this copy was made at.
	gen uint64
	// mpsUsers: who the MPS clients of the node's cards in mps mode run
	// as; nil when none has a client.
	mpsUsers []cardUser
	// cards holds node.Cards when there are at most 8.
	cards [8]allocator.Card
}

// nodeIndex finds a node's slot by name without a lock. It is immutable:
// a change of a node replaces only its slot's snapshot; adding a node
// replaces the index, copying only recent (the nodes added since base was
// built) until that grows past maxRecent, when base is rebuilt with them.
// So an add costs O(maxRecent) and, amortised, O(nodes/maxRecent). A
// removed node's slot holds no snapshot (dead) until the next rebuild
// drops it, and a node is looked up in base first: a reader hashes a name
// once unless the node is new or unknown.
type nodeIndex struct {
	// base: node name -> slot.
	base map[string]*nodeSlot
	// recent: node name -> slot of the nodes added since base was built
	// (that base lacks, or holds dead).
	recent map[string]*nodeSlot
}

// maxRecent bounds nodeIndex.recent.
const maxRecent = 256

// nodeSlot holds the last published copy of one node.
type nodeSlot struct {
	snap atomic.Pointer[nodeSnap]
}

// lookup returns node name's slot, nil if the index has none (or only a
// dead one).
func (x *nodeIndex) lookup(name string) *nodeSlot {
	if slot := x.base[name]; slot != nil && slot.snap.Load() != nil {
		return slot
	}
	if slot := x.recent[name]; slot != nil && slot.snap.Load() != nil {
		return slot
	}
	return nil
}

// with returns a copy of x in which name's slot is slot, whose snapshot is
// already stored; the slot name had before must be dead.
func (x *nodeIndex) with(name string, slot *nodeSlot) *nodeIndex {
	if len(x.recent) < maxRecent {
		y := &nodeIndex{base: x.base, recent: make(map[string]*nodeSlot, len(x.recent)+1)}
		for k, v := range x.recent {
			y.recent[k] = v
		}
		y.recent[name] = slot
		return y
	}
	y := &nodeIndex{base: make(map[string]*nodeSlot, len(x.base)+len(x.recent)+1)}
	for _, m := range []map[string]*nodeSlot{x.base, x.recent, {name: slot}} {
		for k, v := range m {
			if v.snap.Load() != nil {
				y.base[k] = v
			}
		}
	}
	return y
}

// policyInputs is what a policy is built from (newPolicy): a copy made
// under the cache's lock whenever one of them changed, read without it.
type policyInputs struct {
	// defaultPolicy is Config.Policy.
	defaultPolicy string
	typical       []allocator.Shape // Workload.Typical; shared, never modified
	holes         *allocator.Holes  // a copy of the cache's
	// cpuPerUnit is Workload.CPUPerUnit (millicores per unit).
	cpuPerUnit float64
	// maxMilliCPU and maxUnits as in Cache.
	maxMilliCPU, maxUnits int64
}

// touch records that ns changed: publish copies it for the readers. The
// caller holds c.mu.
func (c *Cache) touch(ns *nodeState) {
	c.inputsDirty = true
	if !ns.dirty {
		ns.dirty = true
		c.dirty = append(c.dirty, ns)
	}
}

// publish hands the readers a copy of every node changed since the last
// publish and, if they changed, of the policy's inputs. Every method that
// changes the cache calls it before it releases c.mu, so a reader sees
// every change that completed before it began. The caller holds c.mu.
func (c *Cache) publish() {
	if len(c.dirty) > 0 || c.inputsDirty || c.workloadDirty {
		c.generation.Add(1)
	}
	for _, ns := range c.dirty {
		ns.dirty = false
		ns.gen++
		name := ns.node.Name
		if cur, ok := c.nodes[name]; !ok || cur != ns || !ns.seen {
			// Deleted, or a placeholder: readers know it not.
			if ns.slot != nil {
				ns.slot.snap.Store(nil) // dead
				ns.slot = nil
			}
			continue
		}
		if ns.slot != nil {
			ns.slot.snap.Store(ns.snap(c.pods))
			continue
		}
		ns.slot = &nodeSlot{}
		ns.slot.snap.Store(ns.snap(c.pods))
		c.index.Store(c.index.Load().with(name, ns.slot))
	}
	c.dirty = c.dirty[:0]
	if !c.inputsDirty && !c.workloadDirty {
		return
	}
	in := &policyInputs{defaultPolicy: c.policy, holes: c.holes.Clone(), cpuPerUnit: c.workload.CPUPerUnit(), maxMilliCPU: c.maxMilliCPU, maxUnits: c.maxUnits}
	in.typical = c.inputs.Load().typical
	if c.workloadDirty {
		in.typical = c.workload.Typical()
	}
	c.inputs.Store(in)
	c.inputsDirty, c.workloadDirty = false, false
}

// Generation counts the changes published so far: two equal readings mean
// no node, pod or policy input changed in between. It takes no lock.
func (c *Cache) Generation() uint64 { return c.generation.Load() }

// snap copies ns for the readers, its cards in the same allocation as the
// rest when they are few (one place in memory to read). The caller holds
// c.mu.
func (ns *nodeState) snap(pods map[types.UID]*podState) *nodeSnap {
	s := &nodeSnap{node: ns.node, source: ns.source, invErr: ns.invErr, cordonErr: ns.cordonErr, hostKnown: ns.hostKnown,
		freeMilliCPU: ns.allocMilliCPU - ns.reqMilliCPU, freeMemMiB: ns.allocMemMiB - ns.reqMemMiB, gen: ns.gen, mpsUsers: ns.mpsUsers(pods)}
	if len(ns.node.Cards) <= len(s.cards) {
		s.node.Cards = s.cards[:len(ns.node.Cards)]
		copy(s.node.Cards, ns.node.Cards)
	} else {
		s.node.Cards = append([]allocator.Card(nil), ns.node.Cards...)
	}
	return s
}

// snapOf returns the last published copy of node name, nil for a node the
// cache has not seen (or only as a placeholder). It takes no lock.
func (c *Cache) snapOf(name string) *nodeSnap {
	if slot := c.index.Load().lookup(name); slot != nil {
		return slot.snap.Load()
	}
	return nil
}

// policy returns the named policy (the default for ""), built from in: fed
// with the typical requests (fragaware and fgd use them; the others ignore
// them) and, for fragaware, the cluster's holes and CPU demand.
func (in *policyInputs) policy(name string) (allocator.Policy, error) {
	if name == "" {
		name = in.defaultPolicy
	}
	p, err := allocator.New(name, in.typical, in.holes)
	if f, ok := p.(*allocator.FragAware); ok {
		f.SetCPUDemand(in.cpuPerUnit)
	}
	return p, err
}

// gpuSnap returns the published copy of node name if the node has cards
// and takes new pods; otherwise nil and why not, with unknown true for a
// node the extender has not seen. It takes no lock.
func (c *Cache) gpuSnap(name string) (s *nodeSnap, reason string, unknown bool) {
	return gpuOf(c.snapOf(name))
}

// gpuOf is gpuSnap for the published copy s (nil: an unknown node).
func gpuOf(s *nodeSnap) (_ *nodeSnap, reason string, unknown bool) {
	switch {
	case s == nil:
		return nil, "node unknown to the gpushare extender (not yet in its informer cache)", true
	case len(s.node.Cards) == 0:
		reason := "node reports no GPU memory (" + string(gpushare.ResourceGPUMem) + ")"
		if s.invErr != "" {
			reason += "; " + s.invErr
		}
		return nil, reason, false
	case s.cordonErr != "":
		return nil, s.cordonErr, false
	}
	return s, "", false
}

// fitSnap places pod's Demand on the cards of node name that its
// constraints allow, with policy p into pl, spending b; reason says why it
// does not fit ("" when it does). cr is the room reserved for the pod
// (creditFor), free to it; nil when none. It takes no lock.
func (c *Cache) fitSnap(name string, pod *kubeinfo.PodInfo, cr *credit, p allocator.Policy, pl *allocator.Placement, b *allocator.Budget) (s *nodeSnap, reason string) {
	s, reason, _ = c.gpuSnap(name)
	if s == nil {
		return nil, reason
	}
	s = cr.on(s).forMPS(pod.MPSUser)
	if reason := fitReason(&s.node, s.source, s.invErr, pod, p, pl, b); reason != "" {
		return nil, reason
	}
	return s, ""
}

// fitReason places pod's Demand on the cards of n (whose cards come from
// source; invErr explains an ignored inventory) that its constraints
// allow, with policy p into pl, spending b, and says why it does not fit
// ("" when it does).
func fitReason(n *allocator.Node, source, invErr string, pod *kubeinfo.PodInfo, p allocator.Policy, pl *allocator.Placement, b *allocator.Budget) string {
	if dra := source == SourceDRA; dra != pod.DRA {
		if dra {
			return "the gpushare DRA driver serves the node's cards: only pods asking GPU memory through its claims run there"
		}
		return "the pod asks GPU memory through a claim of the gpushare DRA driver, which does not serve this node's cards"
	}
	if cc := pod.Constraints; cc != nil && source != SourceInventory && source != SourceDRA && (cc.ReadsModel() || cc.ReadsUUID()) {
		// Every card would be excluded as unknown: say why once.
		reason := "the pod asks a GPU " + cc.String() + "; the node publishes no " + gpushare.AnnotationInventory +
			" inventory (its cards come from " + string(gpushare.ResourceGPUMem) + " capacity), so their models and UUIDs are unknown"
		if invErr != "" {
			reason += "; " + invErr
		}
		return reason
	}
	// Feasibility does not depend on the policy (Filter uses Binpack) as
	// long as the search is exhaustive, which it is for pods of a few GPU
	// containers; only a pod whose search a budget stops could be found
	// to fit in one policy's card order and not in another's.
	if err := allocator.FitBudget(n, pod.Demand, pod.Constraints, p, pl, b); err != nil {
		var fe *allocator.FitError
		if errors.As(err, &fe) {
			return fe.Reason
		}
		return err.Error()
	}
	return ""
}
