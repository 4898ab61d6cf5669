package view

import (
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
)

// View holds what the cache last published, for the readers. The cache
// writes it under its lock (SetIndex, SetInputs, Pin, Unpin). The readers
// take no lock, except credit, which takes it while some room is reserved.
type View struct {
	// index finds, by name, the slot holding the last published copy of every
	// node seen (not placeholders). inputs: the policy's inputs as last
	// published.
	index  atomic.Pointer[Index]
	inputs atomic.Pointer[Inputs]
	// binding: pod UID (types.UID) -> node name (string), for each of the
	// cache's assumptions, a bind that has not ended or ended with an unknown
	// outcome. The verbs send the pod's next try to that node (pinnedNode).
	binding sync.Map
	// credit returns the room reserved for a pod, nil when none.
	credit func(uid types.UID) *Credit
}

// New returns a view of no node, with the policy inputs in. credit returns
// the room reserved for a pod.
func New(in *Inputs, credit func(uid types.UID) *Credit) *View {
	v := &View{credit: credit}
	v.index.Store(&Index{})
	v.inputs.Store(in)
	return v
}

// Index returns the index last set.
func (v *View) Index() *Index { return v.index.Load() }

// SetIndex publishes x.
func (v *View) SetIndex(x *Index) { v.index.Store(x) }

// Inputs returns the policy inputs last set.
func (v *View) Inputs() *Inputs { return v.inputs.Load() }

// SetInputs publishes in.
func (v *View) SetInputs(in *Inputs) { v.inputs.Store(in) }

// Pin records that pod uid's bind to node has not ended (pinnedNode).
func (v *View) Pin(uid types.UID, node string) { v.binding.Store(uid, node) }

// Unpin forgets pod uid's bind.
func (v *View) Unpin(uid types.UID) { v.binding.Delete(uid) }

// Snap returns the last published copy of node name. It is nil for a node
// the cache has not seen, or only as a placeholder. It takes no lock.
func (v *View) Snap(name string) *Snap {
	if slot := v.index.Load().Lookup(name); slot != nil {
		return slot.Snap.Load()
	}
	return nil
}

// Credit is the room reserved for one pod, which that pod's own fit sees as
// free.
type Credit struct {
	Node     string
	PerCard  allocator.CardUnits
	MilliCPU int64
	MemMiB   int64
}

// On returns s as the credit's pod sees it: its reserved room free when s
// is the credit's node, else s itself.
func (cr *Credit) On(s *Snap) *Snap {
	if cr == nil || s == nil || s.Node.Name != cr.Node {
		return s
	}
	out := *s
	out.Node = *cr.OnNode(&s.Node)
	out.FreeMilliCPU += cr.MilliCPU
	out.FreeMemMiB += cr.MemMiB
	return &out
}

// OnNode returns a copy of n with the credit's units taken off its cards'
// Used when n is the credit's node, else n itself.
func (cr *Credit) OnNode(n *allocator.Node) *allocator.Node {
	if cr == nil || n.Name != cr.Node {
		return n
	}
	out := *n
	out.Cards = slices.Clone(n.Cards)
	for i := range out.Cards {
		out.Cards[i].Used -= cr.PerCard.Get(out.Cards[i].Index)
	}
	return &out
}
