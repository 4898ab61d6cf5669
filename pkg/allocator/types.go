package allocator

import (
	"fmt"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Card is one GPU as the allocator sees it. Memory is in the node's unit.
//
// It holds what a fit reads of every card. What only constraints and
// reports read lives behind Info, shared by the copies of a card. The
// extender fits a pod on thousands of nodes per filter call. Its time goes
// to loading their cards from memory, so a card is kept small: TestCardSize
// holds it to 40 bytes on 64-bit machines. docs/benchmarks.md, under
// "Scale (issue 26)", has what moving Info out saved.
type Card struct {
	// Index is the card's index on its node.
	Index int
	// Total memory of the card, in units.
	Total int64
	// Used is the memory held by pods, in units. It may exceed Total when
	// the node shrank under running pods. Free is then 0.
	Used int64
	// Info is the card's identity and isolation. It is nil when the node
	// publishes none, and its cards come from capacity alone. It is never
	// modified once set; a change replaces it.
	Info *CardInfo
	// Rank is the card's place in its node's DRA ResourceSlice, 0 first.
	// kube-scheduler's first fit tries the cards of a node the gpushare DRA
	// driver serves in that order (SliceOrder). It is 0 on other nodes.
	Rank int32
	// Healthy cards take new pods; unhealthy ones keep what they hold.
	Healthy bool
	// Cordoned: the operator keeps new pods off the card (node annotation
	// gpushare.io/cordoned-gpus). Pods already on it keep what they hold.
	Cordoned bool
	// ForeignMPS: the card's MPS clients run as another Linux user than
	// the pod being placed. Its MPS server would not serve that pod's
	// containers. It is set on that pod's copy of the node only.
	ForeignMPS bool
}

// CardInfo is what the allocator reads of a card only under constraints
// (Eligible) or to report it.
type CardInfo struct {
	// UUID is empty when the node publishes no inventory.
	UUID  string
	Model string
	// Isolation is how the card enforces each container's share of its
	// memory (inventory "isolation"). "" is unknown, and enforces nothing.
	Isolation gpushare.Isolation
}

// UUID returns the card's UUID, "" when unknown.
func (c *Card) UUID() string {
	if c.Info == nil {
		return ""
	}
	return c.Info.UUID
}

// Model returns the card's model, "" when unknown.
func (c *Card) Model() string {
	if c.Info == nil {
		return ""
	}
	return c.Info.Model
}

// Isolation returns how the card enforces each container's share of its
// memory. It is "" when the node does not say, which enforces nothing.
func (c *Card) Isolation() gpushare.Isolation {
	if c.Info == nil {
		return ""
	}
	return c.Info.Isolation
}

// Free returns the units a new pod may take on the card. It is 0 for an
// unhealthy or cordoned card, and for one whose MPS clients the pod may not
// join.
func (c *Card) Free() int64 {
	if !c.Healthy || c.Cordoned || c.ForeignMPS || c.Used >= c.Total {
		return 0
	}
	return c.Total - c.Used
}

// Node is a node's cards. Cards is ordered by Index.
type Node struct {
	Name string
	// Unit of every amount on this node ("GiB" or "MiB").
	Unit  string
	Cards []Card
}

// Capacity returns the sum of the healthy cards' totals, in units.
func (n *Node) Capacity() int64 {
	var t int64
	for i := range n.Cards {
		if n.Cards[i].Healthy {
			t += n.Cards[i].Total
		}
	}
	return t
}

// FreeTotal returns the sum of Free over the cards, in units.
func (n *Node) FreeTotal() int64 {
	var t int64
	for i := range n.Cards {
		t += n.Cards[i].Free()
	}
	return t
}

// Placement says where each container of a Demand goes.
type Placement struct {
	// Cards holds, parallel to the Demand, the positions in Node.Cards
	// (not card indexes) of each container's cards.
	Cards [][]int
	// Reserved holds, parallel to Node.Cards, the units the pod holds on
	// each card (gpushare.Allocation.PerCard). That is the largest of its
	// non-init containers' sum there and, for each plain init container
	// there, that one plus the sidecars declared before it there.
	Reserved []int64
}

// Total returns the units the pod holds on the node.
func (p *Placement) Total() int64 {
	var t int64
	for _, r := range p.Reserved {
		t += r
	}
	return t
}

// FitError explains why a demand does not fit on a node.
type FitError struct {
	Node   string
	Reason string
	// Budget: the search stopped on a budget before it could tell, and
	// the demand may fit. The budget is the node's, or the request's
	// (FitBudget).
	Budget bool
}

func (e *FitError) Error() string { return fmt.Sprintf("node %s: %s", e.Node, e.Reason) }
