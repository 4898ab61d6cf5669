package view

import (
	"errors"
	"sync/atomic"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// Snap is what the read-only verbs (filter, prioritize, and a bind's
// search) need of one node. The cache makes this copy under its lock each
// time the node changes (publish) and never modifies it after. So the
// verbs read it without the lock and never wait behind informer events or
// binds.
type Snap struct {
	// Node holds a copy of the cards.
	Node   allocator.Node
	Source string // SourceInventory, SourceCapacity, SourceDRA or SourceNone
	// InvErr and CordonErr as in the cache's nodeState.
	InvErr, CordonErr string
	// HostKnown: the node reports its CPU. FreeMilliCPU and FreeMemMiB are
	// then its allocatable CPU (millicores) and memory (MiB), less what its
	// pods request.
	HostKnown                bool
	FreeMilliCPU, FreeMemMiB int64
	// Gen is the nodeState's generation this copy was made at.
	Gen uint64
	// MPSUsers: who the MPS clients of the node's cards in mps mode run as;
	// nil when none has a client.
	MPSUsers []CardUser
	// cards holds Node.Cards when there are at most 8.
	cards [8]allocator.Card
}

// SetCards sets s's cards to a copy of cards. When they are few, the copy
// shares s's allocation: one place in memory to read.
func (s *Snap) SetCards(cards []allocator.Card) {
	if len(cards) <= len(s.cards) {
		s.Node.Cards = s.cards[:len(cards)]
		copy(s.Node.Cards, cards)
	} else {
		s.Node.Cards = append([]allocator.Card(nil), cards...)
	}
}

// Index finds a node's slot by name without a lock. It is immutable. A
// change of a node replaces only its slot's snapshot. Adding a node
// replaces the index, copying only recent, the nodes added since base was
// built. Once recent grows past maxRecent, base is rebuilt with them. So an
// add costs O(maxRecent), and amortised O(nodes/maxRecent). A removed
// node's slot holds no snapshot (it is dead) until the next rebuild drops
// it. A node is looked up in base first, so a reader hashes a name once
// unless the node is new or unknown.
type Index struct {
	// base: node name -> slot.
	base map[string]*Slot
	// recent: node name -> slot of the nodes added since base was built, which
	// base lacks or holds dead.
	recent map[string]*Slot
}

// maxRecent bounds Index.recent.
const maxRecent = 256

// Slot holds the last published copy of one node.
type Slot struct {
	Snap atomic.Pointer[Snap]
}

// Lookup returns node name's slot, nil if the index has none or only a
// dead one.
func (x *Index) Lookup(name string) *Slot {
	if slot := x.base[name]; slot != nil && slot.Snap.Load() != nil {
		return slot
	}
	if slot := x.recent[name]; slot != nil && slot.Snap.Load() != nil {
		return slot
	}
	return nil
}

// With returns a copy of x in which name's slot is slot, whose snapshot is
// already stored. The slot name had before must be dead.
func (x *Index) With(name string, slot *Slot) *Index {
	if len(x.recent) < maxRecent {
		y := &Index{base: x.base, recent: make(map[string]*Slot, len(x.recent)+1)}
		for k, v := range x.recent {
			y.recent[k] = v
		}
		y.recent[name] = slot
		return y
	}
	y := &Index{base: make(map[string]*Slot, len(x.base)+len(x.recent)+1)}
	for _, m := range []map[string]*Slot{x.base, x.recent, {name: slot}} {
		for k, v := range m {
			if v.Snap.Load() != nil {
				y.base[k] = v
			}
		}
	}
	return y
}

// All yields the name of every slot of x, dead ones too, base's first.
func (x *Index) All(yield func(name string) bool) {
	for _, m := range []map[string]*Slot{x.base, x.recent} {
		for name := range m {
			if !yield(name) {
				return
			}
		}
	}
}

// Inputs is what a policy is built from (Policy). The cache makes a copy
// under its lock whenever one of them changed; readers read it without it.
type Inputs struct {
	// DefaultPolicy is Config.Policy.
	DefaultPolicy string
	Typical       []allocator.Shape // Workload.Typical; shared, never modified
	Holes         *allocator.Holes  // a copy of the cache's
	// CPUPerUnit is Workload.CPUPerUnit (millicores per unit).
	CPUPerUnit float64
	// MaxMilliCPU and MaxUnits as in Cache.
	MaxMilliCPU, MaxUnits int64
	// Restrictions is Workload.Restrictions; shared, never modified.
	Restrictions []allocator.Restriction
	// ModelCosts is allocator.ModelCosts of Restrictions and Holes.
	ModelCosts map[string]float64
}

// Policy returns the named policy (the default for ""), built from in for
// a pod whose cards cc constrains (nil: none). It is fed the typical
// requests, which fragaware and fgd use and the others ignore. fragaware
// also gets the cluster's holes, CPU demand and model costs.
func (in *Inputs) Policy(name string, cc *gpushare.CardConstraints) (allocator.Policy, error) {
	if name == "" {
		name = in.DefaultPolicy
	}
	p, err := allocator.New(name, in.Typical, in.Holes)
	if f, ok := p.(*allocator.FragAware); ok {
		f.SetCPUDemand(in.CPUPerUnit)
		f.SetModels(in.ModelCosts, cc)
	}
	return p, err
}

// gpuSnap returns the published copy of node name if the node has cards
// and takes new pods. Otherwise it returns nil and why not; unknown is true
// for a node the extender has not seen. It takes no lock.
func (v *View) gpuSnap(name string) (s *Snap, reason string, unknown bool) {
	return GPUOf(v.Snap(name))
}

// GPUOf is gpuSnap for the published copy s; a nil s is an unknown node.
func GPUOf(s *Snap) (_ *Snap, reason string, unknown bool) {
	switch {
	case s == nil:
		return nil, "node unknown to the gpushare extender (not yet in its informer cache)", true
	case len(s.Node.Cards) == 0:
		reason := "node reports no GPU memory (" + string(gpushare.ResourceGPUMem) + ")"
		if s.InvErr != "" {
			reason += "; " + s.InvErr
		}
		return nil, reason, false
	case s.CordonErr != "":
		return nil, s.CordonErr, false
	}
	return s, "", false
}

// fitSnap places pod's Demand, with policy p into pl, on the cards of node
// name that its constraints allow, spending b. reason says why it does not
// fit, "" when it does. cr is the room reserved for the pod (View.credit),
// free to it; nil when none. It takes no lock.
func (v *View) fitSnap(name string, pod *kubeinfo.PodInfo, cr *Credit, p allocator.Policy, pl *allocator.Placement, b *allocator.Budget) (s *Snap, reason string) {
	s, reason, _ = v.gpuSnap(name)
	if s == nil {
		return nil, reason
	}
	s = cr.On(s).ForMPS(pod.MPSUser)
	if reason := FitReason(&s.Node, s.Source, s.InvErr, pod, p, pl, b); reason != "" {
		return nil, reason
	}
	return s, ""
}

// FitReason places pod's Demand, with policy p into pl, on the cards of n
// that its constraints allow, spending b. It says why the demand does not
// fit, "" when it does. n's cards come from source; invErr explains an
// ignored inventory.
func FitReason(n *allocator.Node, source, invErr string, pod *kubeinfo.PodInfo, p allocator.Policy, pl *allocator.Placement, b *allocator.Budget) string {
	if dra := source == inspectapi.SourceDRA; dra != pod.DRA {
		if dra {
			return "the gpushare DRA driver serves the node's cards: only pods asking GPU memory through its claims run there"
		}
		return "the pod asks GPU memory through a claim of the gpushare DRA driver, which does not serve this node's cards"
	}
	if cc := pod.Constraints; cc != nil && source != inspectapi.SourceInventory && source != inspectapi.SourceDRA && (cc.ReadsModel() || cc.ReadsUUID()) {
		// Every card would be excluded as unknown: say why once.
		reason := "the pod asks a GPU " + cc.String() + "; the node publishes no " + gpushare.AnnotationInventory +
			" inventory (its cards come from " + string(gpushare.ResourceGPUMem) + " capacity), so their models and UUIDs are unknown"
		if invErr != "" {
			reason += "; " + invErr
		}
		return reason
	}
	// Feasibility does not depend on the policy (Filter uses Binpack) as
	// long as the search is exhaustive. It is, for pods of a few GPU
	// containers. Only a pod whose search a budget stops could fit in one
	// policy's card order and not in another's.
	if err := allocator.FitBudget(n, pod.Demand, pod.Constraints, p, pl, b); err != nil {
		var fe *allocator.FitError
		if errors.As(err, &fe) {
			return fe.Reason
		}
		return err.Error()
	}
	return ""
}
