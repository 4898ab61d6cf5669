package handoff

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// cardSet is a node's cards, fixed when the Handoff is made: its methods
// read nothing else, so they need no lock.
type cardSet struct {
	// node is the node's name, for errors.
	node string
	// byUUID: card UUID -> card.
	byUUID map[string]Card
}

// byCard groups device IDs by card UUID, each group sorted by unit number.
// Each ID is parsed once, as a MiB node has tens of thousands. It fails on
// an ID that is malformed or on none of the cards.
func (cs cardSet) byCard(ids []string) (map[string][]string, error) {
	type unit struct {
		id string
		k  int64 // unit number
	}
	units := map[string][]unit{} // UUID -> its units
	for _, id := range ids {
		uuid, k, err := ParseDeviceID(id)
		if err != nil {
			return nil, err
		}
		if _, ok := cs.byUUID[uuid]; !ok {
			return nil, fmt.Errorf("%w: %s is not on any card of node %s", ErrDeviceID, id, cs.node)
		}
		units[uuid] = append(units[uuid], unit{id, k})
	}
	out := make(map[string][]string, len(units))
	for uuid, us := range units {
		slices.SortFunc(us, func(a, b unit) int { return cmp.Compare(a.k, b.k) })
		g := make([]string, len(us))
		for i, u := range us {
			g[i] = u.id
		}
		out[uuid] = g
	}
	return out, nil
}

// available groups kubelet's free device IDs by card UUID, each group
// sorted by unit number. Each ID goes to its slot, so nothing is sorted. It
// leaves out those in skip, the IDs kubelet must include anyway. It leaves
// out those this plugin does not advertise: malformed, on none of the cards,
// or past a card's units.
func (cs cardSet) available(ids []string, skip map[string]bool) map[string][]string {
	out := map[string][]string{} // UUID -> IDs at their unit numbers
	for _, id := range ids {
		if skip[id] {
			continue
		}
		uuid, k, err := ParseDeviceID(id)
		if err != nil {
			continue
		}
		c, ok := cs.byUUID[uuid]
		if !ok || k >= c.Units {
			continue
		}
		slots := out[uuid]
		if slots == nil {
			slots = make([]string, c.Units)
			out[uuid] = slots
		}
		slots[k] = id
	}
	for uuid, slots := range out {
		out[uuid] = slices.DeleteFunc(slots, func(id string) bool { return id == "" })
	}
	return out
}

// sharesOf returns the cards of grouped IDs as shares, in card index order.
func (cs cardSet) sharesOf(groups map[string][]string) []gpushare.DeviceShare {
	out := make([]gpushare.DeviceShare, 0, len(groups))
	for uuid, ids := range groups {
		out = append(out, gpushare.DeviceShare{Index: cs.byUUID[uuid].Index, UUID: uuid, Units: int64(len(ids))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

func sameShares(a, b []gpushare.DeviceShare) bool {
	if len(a) != len(b) {
		return false
	}
	x := slices.Clone(a)
	y := slices.Clone(b)
	for _, s := range [][]gpushare.DeviceShare{x, y} {
		sort.Slice(s, func(i, j int) bool { return s[i].Index < s[j].Index })
	}
	for i := range x {
		if x[i].Index != y[i].Index || x[i].Units != y[i].Units || (x[i].UUID != "" && y[i].UUID != "" && x[i].UUID != y[i].UUID) {
			return false
		}
	}
	return true
}

// fitsShape reports whether shares are Cards distinct cards of Units each.
func fitsShape(shares []gpushare.DeviceShare, c gpushare.ContainerAllocation) bool {
	if len(shares) != len(c.Devices) {
		return false
	}
	for _, s := range shares {
		if s.Units != c.Devices[0].Units {
			return false
		}
	}
	return true
}

// pick chooses device IDs for container c: all of forced, plus the lowest
// free units of the cards c's annotation names. With relocate it may take
// other cards with room that the pod's constraints cc allow, best fit
// first; allocator.Exclude decides, and a nil cc allows any. It returns nil
// when no set of len(c.Devices) cards with c's units each can be made.
//
// The operator's cordon, gpushare.io/cordoned-gpus, does not bind a
// relocation. It keeps the scheduler from sending new pods to a card, and
// this pod was scheduled already. kubelet's free devices, not a choice, move
// it, and refusing would fail a pod the cluster accepted.
func (cs cardSet) pick(c gpushare.ContainerAllocation, avail, forced map[string][]string, relocate bool, cc *gpushare.CardConstraints) []string {
	k, u := len(c.Devices), c.Devices[0].Units
	var chosen []string
	has := func(uuid string) bool { return slices.Contains(chosen, uuid) }
	room := func(uuid string) bool { return int64(len(avail[uuid])+len(forced[uuid])) >= u }
	for _, uuid := range cs.sortedUUIDs(forced) {
		// Every forced card is in the answer, so it must hold u units:
		// its forced IDs plus free ones (see reusedShort).
		if int64(len(forced[uuid])) > u || !room(uuid) {
			return nil
		}
		chosen = append(chosen, uuid)
	}
	for _, d := range c.Devices {
		if len(chosen) == k {
			break
		}
		uuid := d.UUID
		if uuid == "" {
			uuid = cs.uuidOfIndex(d.Index)
		}
		if !has(uuid) && room(uuid) {
			chosen = append(chosen, uuid)
		}
	}
	if len(chosen) < k && relocate {
		others := []string{}
		for uuid := range cs.byUUID {
			if !has(uuid) && room(uuid) && cs.allows(cc, uuid) {
				others = append(others, uuid)
			}
		}
		sort.Slice(others, func(i, j int) bool {
			a, b := len(avail[others[i]]), len(avail[others[j]])
			if a != b {
				return a < b
			}
			return cs.byUUID[others[i]].Index < cs.byUUID[others[j]].Index
		})
		for _, uuid := range others {
			if len(chosen) == k {
				break
			}
			chosen = append(chosen, uuid)
		}
	}
	if len(chosen) != k {
		return nil
	}
	// Every forced card must be one of the annotated ones unless relocating.
	if !relocate {
		for _, uuid := range chosen {
			if !slices.ContainsFunc(c.Devices, func(d gpushare.DeviceShare) bool {
				return d.UUID == uuid || (d.UUID == "" && cs.byUUID[uuid].Index == d.Index)
			}) {
				return nil
			}
		}
	}
	var ids []string
	for _, uuid := range chosen {
		ids = append(ids, forced[uuid]...)
		need := u - int64(len(forced[uuid]))
		ids = append(ids, avail[uuid][:need]...)
	}
	return ids
}

// allows reports whether a pod with constraints cc may use card uuid, by
// allocator.Exclude on the card's model, UUID and isolation.
func (cs cardSet) allows(cc *gpushare.CardConstraints, uuid string) bool {
	if cc == nil {
		return true
	}
	c := cs.byUUID[uuid]
	return allocator.Exclude(cc, &allocator.Card{Info: &allocator.CardInfo{UUID: c.UUID, Model: c.Model, Isolation: c.Isolation}}) == allocator.Eligible
}

// allowsShares reports whether pod e's card annotations allow every card
// of shares (false when they are invalid).
func (cs cardSet) allowsShares(e *podEntry, shares []gpushare.DeviceShare) bool {
	if e.constraintsErr != nil {
		return false
	}
	for _, s := range shares {
		if !cs.allows(e.constraints, s.UUID) {
			return false
		}
	}
	return true
}

// excludedCards lists the cards a pod with constraints cc may not use, for
// an admission error: "; the pod's card annotations exclude card 0 (Tesla
// T4), card 1 (Tesla T4)"; "" when none.
func (cs cardSet) excludedCards(cc *gpushare.CardConstraints) string {
	var parts []string
	for _, c := range cs.sortedCards() {
		if !cs.allows(cc, c.UUID) {
			parts = append(parts, fmt.Sprintf("card %d (%s)", c.Index, c.Model))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "; the pod's card annotations exclude " + strings.Join(parts, ", ")
}

// describeConstraints is " " and the cards cc allows, "" for nil.
func describeConstraints(cc *gpushare.CardConstraints) string {
	if cc == nil {
		return ""
	}
	return " " + cc.String()
}

// reusedShort explains why the IDs kubelet must include cannot be part of
// an answer for c. They are an init container's, which kubelet reuses. A
// card of them may have fewer than c's units free and forced together, or
// they may span more cards than c asks. "" when neither holds.
func (cs cardSet) reusedShort(c gpushare.ContainerAllocation, avail, forced map[string][]string) string {
	u := c.Devices[0].Units
	uuids := cs.sortedUUIDs(forced)
	if len(uuids) > len(c.Devices) {
		return fmt.Sprintf("kubelet must include units of %d cards (reused from the pod's init containers)", len(uuids))
	}
	for _, uuid := range uuids {
		if int64(len(forced[uuid])+len(avail[uuid])) < u {
			return fmt.Sprintf("kubelet must include %d units of card %d (reused from the pod's init containers) and has %d more free there",
				len(forced[uuid]), cs.byUUID[uuid].Index, len(avail[uuid]))
		}
	}
	return ""
}

func (cs cardSet) uuidOfIndex(index int) string {
	for uuid, c := range cs.byUUID {
		if c.Index == index {
			return uuid
		}
	}
	return ""
}

func (cs cardSet) sortedUUIDs(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for uuid := range m {
		out = append(out, uuid)
	}
	sort.Slice(out, func(i, j int) bool { return cs.byUUID[out[i]].Index < cs.byUUID[out[j]].Index })
	return out
}

func (cs cardSet) freeByCard(avail, forced map[string][]string) string {
	var parts []string
	for _, c := range cs.sortedCards() {
		parts = append(parts, fmt.Sprintf("card %d: %d", c.Index, len(avail[c.UUID])+len(forced[c.UUID])))
	}
	return strings.Join(parts, ", ")
}

func (cs cardSet) sortedCards() []Card {
	out := make([]Card, 0, len(cs.byUUID))
	for _, c := range cs.byUUID {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

func (cs cardSet) describeIDs(ids []string) string {
	groups, err := cs.byCard(ids)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, s := range cs.sharesOf(groups) {
		parts = append(parts, fmt.Sprintf("card %d: %d", s.Index, s.Units))
	}
	return strings.Join(parts, ", ")
}

// DescribeShares names cards and their units for logs and errors:
// "card 0 (GPU-0) 4 units + card 1 (GPU-1) 4 units".
func DescribeShares(s []gpushare.DeviceShare) string {
	var parts []string
	for _, d := range s {
		parts = append(parts, fmt.Sprintf("card %d (%s) %d units", d.Index, d.UUID, d.Units))
	}
	return strings.Join(parts, " + ")
}
