package allocator

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// searchBudget bounds the placements Fit examines for one node, so a pod
// with many containers cannot stall a scheduling cycle. Pods of up to a few
// GPU containers on up to 16 cards stay far below it.
const searchBudget = 200_000

// slice is one card's worth of one container: Units on one card.
type slice struct {
	container int // index into the Demand
	units     int64
}

// Fit finds a placement of d on n, trying cards in p's order, or returns a
// *FitError whose reason names the numbers. n is not modified.
func Fit(n *Node, d gpushare.Demand, p Policy) (*Placement, error) {
	pl := &Placement{}
	if err := FitWith(n, d, nil, p, pl); err != nil {
		return nil, err
	}
	return pl, nil
}

// FitInto is Fit writing into pl, whose slices it reuses. Callers that
// score thousands of nodes per request then allocate nothing per node in
// the common case of one single-card container.
func FitInto(n *Node, d gpushare.Demand, p Policy, pl *Placement) error {
	return FitWith(n, d, nil, p, pl)
}

// FitWith is FitInto for a pod whose containers may use only the cards
// Exclude allows under its constraints cc. A nil cc allows any card that is
// not cordoned. A pod without constraints pays one pointer test per card
// that fits. When the demand does not fit, the reason counts the cards
// excluded and why, and speaks of the eligible ones:
//
//	container c0 needs 12 GiB on one GPU of model A100*; 3 GPUs excluded (model Tesla T4 not A100*: 2, cordoned by the operator: 1); largest free eligible GPU has 7 of 80 GiB
func FitWith(n *Node, d gpushare.Demand, cc *gpushare.CardConstraints, p Policy, pl *Placement) error {
	return FitBudget(n, d, cc, p, pl, nil)
}

// The reasons of a FitError whose search stopped before it could tell
// whether the demand fits (FitError.Budget) start with one of these.
const (
	reasonNotExamined  = "not examined: "
	reasonRequestEnded = "no placement found before the request's search ended"
	reasonNodeBudget   = "no placement found within the node's search budget"
)

// Undecided reports whether reason, a FitError's Reason, says the search
// stopped before it could tell whether the demand fits (FitError.Budget).
// It is for callers that hold only the text, such as a filter's failed
// nodes. They must not take "undecided" for "does not fit".
func Undecided(reason string) bool {
	return strings.HasPrefix(reason, reasonNotExamined) || strings.HasPrefix(reason, reasonRequestEnded) || strings.HasPrefix(reason, reasonNodeBudget)
}

// FitBudget is FitWith spending the search steps it takes from b, the
// request's budget. A nil b bounds nothing beyond the node's own
// searchBudget. A single-card pod of one container takes no step. Once b
// has ended, a demand that needs a search is refused without one. Either
// way the *FitError says the search stopped (Budget). It never says the
// demand fits when that was not shown.
func FitBudget(n *Node, d gpushare.Demand, cc *gpushare.CardConstraints, p Policy, pl *Placement, b *Budget) error {
	pl.reset(len(d), len(n.Cards))
	if !Searches(d) {
		units := d[0].Units
		best := -1
		var bestKey float64
		for i := range n.Cards {
			free := n.Cards[i].Free()
			if free < units || cc != nil && Exclude(cc, &n.Cards[i]) != Eligible {
				continue
			}
			if k := p.CardKey(&n.Cards[i], free, units); best < 0 || k < bestKey {
				best, bestKey = i, k
			}
		}
		if best >= 0 {
			pl.Cards[0] = append(pl.Cards[0], best)
			pl.Reserved[best] = units
			return nil
		}
		// Fall through for the reason.
	}
	if len(n.Cards) == 0 {
		return &FitError{Node: n.Name, Reason: "node reports no GPU"}
	}
	cc = cc.ForDemand(d)
	xs := cardExclusions(n, cc)
	if err := precheck(n, d, cc, xs); err != nil {
		return err
	}
	frees := eligibleFrees(n, xs)

	var slices []slice
	for i, c := range d {
		if c.Init {
			continue
		}
		for range c.Cards {
			slices = append(slices, slice{container: i, units: c.Units})
		}
	}
	// Largest first; stable so one container's slices stay adjacent.
	sort.SliceStable(slices, func(a, b int) bool { return slices[a].units > slices[b].units })
	if len(slices) > 0 {
		if err := b.Err(); err != nil {
			return &FitError{Node: n.Name, Budget: true, Reason: reasonNotExamined + err.Error()}
		}
		s := newSearch(n, p, d, slices, xs, frees, pl, b)
		if !s.place(0) {
			reason := "the containers' slices (" + sliceList(slices, n.Unit) + ") do not fit together on the free " + eligibleWord(xs) + "cards (" + freeList(n, xs) + ")"
			switch {
			case !s.halted:
			case b.Err() != nil:
				reason = reasonRequestEnded + " (" + b.Err().Error() + ") for slices (" + sliceList(slices, n.Unit) + ")"
			default:
				reason = reasonNodeBudget + " (" + strconv.Itoa(searchBudget) + " placements) for slices (" + sliceList(slices, n.Unit) + ")"
			}
			return &FitError{Node: n.Name, Budget: s.halted, Reason: reason + excludedSuffix(n, cc, xs)}
		}
	}
	if !placeInits(n, d, p, pl, xs) {
		// Only a pod whose plain init containers follow sidecars gets
		// here: the search checks them at every complete placement.
		return &FitError{Node: n.Name, Reason: "the init containers do not fit beside the sidecars declared before them (" + freeList(n, xs) + ")" + excludedSuffix(n, cc, xs)}
	}
	return nil
}

// Searches reports whether fitting d may search placements, and so spend a
// Budget's steps. Every demand searches but one app container on one card,
// which takes the best card in one pass.
func Searches(d gpushare.Demand) bool {
	return len(d) != 1 || d[0].Init || d[0].Cards != 1
}

// sidecarsBeforeInit reports whether a plain init container of d follows a
// sidecar, a non-init container before it (see gpushare.Demand.Total). Its
// cards then depend on where the sidecars went.
func sidecarsBeforeInit(d gpushare.Demand) bool {
	seenSidecar := false
	for _, c := range d {
		if c.Init && seenSidecar {
			return true
		}
		seenSidecar = seenSidecar || !c.Init
	}
	return false
}

// reset sizes pl for containers containers on cards cards, zeroed, keeping
// its backing arrays.
func (pl *Placement) reset(containers, cards int) {
	if cap(pl.Cards) < containers {
		pl.Cards = make([][]int, containers)
	}
	pl.Cards = pl.Cards[:containers]
	for i := range pl.Cards {
		pl.Cards[i] = pl.Cards[i][:0]
	}
	if cap(pl.Reserved) < cards {
		pl.Reserved = make([]int64, cards)
	}
	pl.Reserved = pl.Reserved[:cards]
	clear(pl.Reserved)
}

// eligibleFrees returns, by card position, the units a container of a pod
// may take on each card (see eligibleFree).
func eligibleFrees(n *Node, xs exclusions) []int64 {
	f := make([]int64, len(n.Cards))
	for i := range n.Cards {
		f[i] = eligibleFree(n, xs, i)
	}
	return f
}

// eligibleFree returns the units a container of a pod may take on the card
// at position pos of n. That is Free, or 0 where the pod's exclusions xs
// keep the pod off the card.
func eligibleFree(n *Node, xs exclusions, pos int) int64 {
	if !xs.eligible(pos) {
		return 0
	}
	return n.Cards[pos].Free()
}

// precheck rejects demands that cannot fit for a simple reason, with a
// message an operator can act on. xs are the exclusions of the pod's
// constraints cc. Every node a filter rejects comes here, so the usual
// messages are built without fmt.
func precheck(n *Node, d gpushare.Demand, cc *gpushare.CardConstraints, xs exclusions) error {
	healthy, eligible, excluded := 0, 0, 0
	var largestFree int64 = -1
	largest := -1
	for i := range n.Cards {
		c := &n.Cards[i]
		if c.Healthy {
			healthy++
		}
		if !xs.eligible(i) {
			excluded++
			continue
		}
		if c.Healthy {
			eligible++
		}
		// The largest free card; among equals, a healthy and bigger one.
		if free := c.Free(); free > largestFree || free == largestFree && (c.Healthy && !n.Cards[largest].Healthy ||
			c.Healthy == n.Cards[largest].Healthy && c.Total > n.Cards[largest].Total) {
			largestFree, largest = free, i
		}
	}
	if healthy == 0 {
		return &FitError{Node: n.Name, Reason: fmt.Sprintf("all %d GPUs are unhealthy", len(n.Cards))}
	}
	for _, c := range d {
		fitting := 0
		for i := range n.Cards {
			if xs.eligible(i) && n.Cards[i].Free() >= c.Units {
				fitting++
			}
		}
		if fitting >= c.Cards {
			continue
		}
		var buf [256]byte
		b := buf[:0]
		b = append(append(append(b, "container "...), c.Name...), " needs "...)
		b = append(append(strconv.AppendInt(b, c.Units, 10), ' '), n.Unit...)
		if c.Cards == 1 {
			b = append(b, " on one GPU"...)
		} else {
			b = append(strconv.AppendInt(append(b, " on each of "...), int64(c.Cards), 10), " GPUs"...)
		}
		if cc != nil {
			b = cc.AppendDescription(append(b, ' '))
		}
		if excluded > 0 {
			b = appendExclusions(append(b, "; "...), n, cc, xs, excluded)
		}
		switch {
		case largest < 0:
			// Every card excluded: nothing more to say.
		case c.Cards == 1:
			b = append(b, "; largest free "...)
			if excluded > 0 {
				b = append(b, "eligible "...)
			}
			b = strconv.AppendInt(append(b, "GPU has "...), largestFree, 10)
			b = strconv.AppendInt(append(b, " of "...), n.Cards[largest].Total, 10)
			b = append(append(b, ' '), n.Unit...)
		default:
			b = strconv.AppendInt(append(b, "; "...), int64(fitting), 10)
			b = strconv.AppendInt(append(b, " of "...), int64(eligible), 10)
			if excluded > 0 {
				b = append(b, " eligible"...)
			}
			b = append(b, " healthy GPUs have that much free"...)
		}
		return &FitError{Node: n.Name, Reason: string(b)}
	}
	var app, free int64
	for _, c := range d {
		if !c.Init {
			app += c.Total()
		}
	}
	for i := range n.Cards {
		if xs.eligible(i) {
			free += n.Cards[i].Free()
		}
	}
	if app > free {
		if excluded > 0 {
			return &FitError{Node: n.Name, Reason: fmt.Sprintf("containers need %d %s in all; eligible GPUs have %d %s free; %s",
				app, n.Unit, free, n.Unit, appendExclusions(nil, n, cc, xs, excluded))}
		}
		return &FitError{Node: n.Name, Reason: fmt.Sprintf("containers need %d %s in all; GPUs have %d %s free", app, n.Unit, free, n.Unit)}
	}
	return nil
}

// eligibleWord is "eligible " when the exclusions xs exclude a card, else
// "".
func eligibleWord(xs exclusions) string {
	if xs.count() > 0 {
		return "eligible "
	}
	return ""
}

// excludedSuffix is "; " and the count of n's cards that xs, the
// exclusions of a pod with constraints cc, excludes. It is "" when there are
// none.
func excludedSuffix(n *Node, cc *gpushare.CardConstraints, xs exclusions) string {
	total := xs.count()
	if total == 0 {
		return ""
	}
	return "; " + string(appendExclusions(nil, n, cc, xs, total))
}

// search is one depth-first placement of the slices of the non-init
// containers (app containers and sidecars).
type search struct {
	node   *Node
	policy Policy
	demand gpushare.Demand
	slices []slice
	// xs: the pod's exclusions.
	xs exclusions
	// frees: card position -> units the pod may take there
	// (eligibleFrees), less the slices placed so far.
	frees  []int64
	pl     *Placement
	budget int     // placements left to examine on this node
	req    *Budget // the request's, nil for none
	// halted: budget or req ran out; the search unwinds.
	halted bool
	// sidecars: a plain init container follows a sidecar. A complete
	// placement then holds only if the init containers fit beside the
	// sidecars (initsFit). Cards of equal free memory are then
	// interchangeable only when the same containers hold them (masks), and
	// the same memory was free to begin with (base).
	sidecars bool
	// base: card position -> eligibleFree before the search. masks: card
	// position -> the containers placed there so far, bit i for demand[i].
	// Both are nil unless sidecars is set and the demand has at most 64
	// containers. With more, no card is taken for another's twin.
	base  []int64
	masks []uint64
	// side: initsFit's scratch, parallel to node.Cards.
	side []int64
}

func newSearch(n *Node, p Policy, d gpushare.Demand, slices []slice, xs exclusions, frees []int64, pl *Placement, b *Budget) *search {
	s := &search{node: n, policy: p, demand: d, slices: slices, xs: xs, frees: frees, pl: pl, budget: searchBudget, req: b,
		sidecars: sidecarsBeforeInit(d)}
	if s.sidecars {
		s.side = make([]int64, len(n.Cards))
		if len(d) <= 64 {
			s.base = append([]int64(nil), frees...)
			s.masks = make([]uint64, len(n.Cards))
		}
	}
	return s
}

// twin reports whether the card at a is interchangeable with the card at
// b for what is left of the search. If placing the slice on one failed,
// placing it on the other fails too.
func (s *search) twin(a, b int) bool {
	if s.frees[a] != s.frees[b] {
		return false
	}
	if !s.sidecars {
		return true
	}
	return s.masks != nil && s.masks[a] == s.masks[b] && s.base[a] == s.base[b]
}

func (s *search) place(k int) bool {
	if k == len(s.slices) {
		return !s.sidecars || initsFit(s.node, s.demand, s.pl, s.xs, s.side)
	}
	if s.budget--; s.budget <= 0 || !s.req.step() {
		s.halted = true
		return false
	}
	sl := s.slices[k]
	mine := s.pl.Cards[sl.container]
	type cand struct {
		pos int
		key float64
	}
	var buf [16]cand
	cands := buf[:0]
	for i := range s.frees {
		if s.frees[i] < sl.units || contains(mine, i) {
			continue
		}
		cands = append(cands, cand{pos: i, key: s.policy.CardKey(&s.node.Cards[i], s.frees[i], sl.units)})
	}
	slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(a.key, b.key) })
	var tried [16]int
	triedPos := tried[:0]
	for _, c := range cands {
		if slices.ContainsFunc(triedPos, func(t int) bool { return s.twin(t, c.pos) }) {
			continue
		}
		triedPos = append(triedPos, c.pos)
		s.frees[c.pos] -= sl.units
		s.pl.Cards[sl.container] = append(mine, c.pos)
		s.pl.Reserved[c.pos] += sl.units
		if s.masks != nil {
			s.masks[c.pos] ^= 1 << sl.container
		}
		// With sidecars, an init container's room only shrinks as more
		// sidecars are placed. Once it is short, no completion fits.
		if (!s.sidecars || initsFit(s.node, s.demand, s.pl, s.xs, s.side)) && s.place(k+1) {
			return true
		}
		s.frees[c.pos] += sl.units
		s.pl.Cards[sl.container] = mine
		s.pl.Reserved[c.pos] -= sl.units
		if s.masks != nil {
			s.masks[c.pos] ^= 1 << sl.container
		}
		if s.halted {
			return false
		}
	}
	return false
}

// placeInits puts each plain init container on the cards that need the
// least extra reservation. An init container that fits within what the pod
// already holds on a card costs nothing there. An init container runs
// before the app containers but beside the sidecars declared before it
// (gpushare.Demand.Total). So on each of its cards it needs its Units plus
// those sidecars' there. placeInits reports false when some init container
// finds too few such cards. precheck rules that out for pods without
// sidecars. xs are the pod's exclusions.
func placeInits(n *Node, d gpushare.Demand, p Policy, pl *Placement, xs exclusions) bool {
	side := make([]int64, len(n.Cards)) // card position -> sidecar units so far
	for i, c := range d {
		if !c.Init {
			for _, pos := range pl.Cards[i] {
				side[pos] += c.Units
			}
			continue
		}
		type cand struct {
			pos   int
			extra int64
			key   float64
		}
		var cands []cand
		for pos := range n.Cards {
			need := side[pos] + c.Units
			free := eligibleFree(n, xs, pos)
			if free < need {
				continue
			}
			extra := max(0, need-pl.Reserved[pos])
			cands = append(cands, cand{pos: pos, extra: extra, key: p.CardKey(&n.Cards[pos], free-pl.Reserved[pos], extra)})
		}
		if len(cands) < c.Cards {
			return false
		}
		sort.SliceStable(cands, func(a, b int) bool {
			if cands[a].extra != cands[b].extra {
				return cands[a].extra < cands[b].extra
			}
			return cands[a].key < cands[b].key
		})
		for _, cd := range cands[:c.Cards] {
			pl.Cards[i] = append(pl.Cards[i], cd.pos)
			pl.Reserved[cd.pos] = max(pl.Reserved[cd.pos], side[cd.pos]+c.Units)
		}
	}
	return true
}

// initsFit reports whether every plain init container of d finds its
// number of cards with room for its Units plus the sidecars declared before
// it there. It reads where pl put the non-init containers. Init containers
// run one at a time, so each is checked on its own. xs are the pod's
// exclusions. side is scratch, parallel to n.Cards. Placing more sidecars
// only takes room. So when initsFit fails for a partial placement pl, every
// completion of it fails too.
func initsFit(n *Node, d gpushare.Demand, pl *Placement, xs exclusions, side []int64) bool {
	clear(side)
	for i, c := range d {
		if !c.Init {
			for _, pos := range pl.Cards[i] {
				side[pos] += c.Units
			}
			continue
		}
		room := 0
		for pos := range n.Cards {
			if eligibleFree(n, xs, pos) >= side[pos]+c.Units {
				room++
			}
		}
		if room < c.Cards {
			return false
		}
	}
	return true
}

// Allocation turns a placement into the pod annotation's form. Each
// container's cards are listed by card index, whatever order the policy
// chose them in. The device plugin gives a container its cards in index
// order (NVIDIA_VISIBLE_DEVICES, ALIYUN_COM_GPU_MEM_IDX). The pod's
// ALIYUN_COM_GPU_MEM_IDX is the first card listed.
func Allocation(n *Node, d gpushare.Demand, pl *Placement) *gpushare.Allocation {
	a := &gpushare.Allocation{Node: n.Name, Unit: n.Unit}
	for i, c := range d {
		ca := gpushare.ContainerAllocation{Name: c.Name, Init: c.Init}
		for _, pos := range pl.Cards[i] {
			card := &n.Cards[pos]
			ca.Devices = append(ca.Devices, gpushare.DeviceShare{Index: card.Index, UUID: card.UUID(), Units: c.Units})
		}
		sort.Slice(ca.Devices, func(x, y int) bool { return ca.Devices[x].Index < ca.Devices[y].Index })
		a.Containers = append(a.Containers, ca)
	}
	return a
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func sliceList(slices []slice, unit string) string {
	parts := make([]string, len(slices))
	for i, s := range slices {
		parts[i] = strconv.FormatInt(s.units, 10)
	}
	return strings.Join(parts, "+") + " " + unit
}

// freeList lists the free units of the cards that the exclusions xs leave
// a pod: "GPU0 8/16, GPU1 8/16 GiB free".
func freeList(n *Node, xs exclusions) string {
	parts := make([]string, 0, len(n.Cards))
	for i := range n.Cards {
		if !xs.eligible(i) {
			continue
		}
		parts = append(parts, fmt.Sprintf("GPU%d %d/%d", n.Cards[i].Index, n.Cards[i].Free(), n.Cards[i].Total))
	}
	return strings.Join(parts, ", ") + " " + n.Unit + " free"
}
