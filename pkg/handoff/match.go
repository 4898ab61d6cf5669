package handoff

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

func containerTotal(c gpushare.ContainerAllocation) int64 {
	var t int64
	for _, d := range c.Devices {
		t += d.Units
	}
	return t
}

// candidate is the next container of a waiting pod.
type candidate struct {
	e  *podEntry
	ci int
	// listed: kubelet's PodResources lists the pod, so kubelet is admitting
	// it now (every other listed pod is admitted already).
	listed bool
}

func (c candidate) container() gpushare.ContainerAllocation { return c.e.alloc.Containers[c.ci] }
func (c candidate) key() containerKey                       { return containerKey{c.e.uid, c.container().Name} }

// candidates returns the waiting containers of size units, listed pods
// first, then by bind time and name. The caller holds h.mu.
func (h *Handoff) candidates(size int64, listed map[string]bool) []candidate {
	var out []candidate
	for _, e := range h.pods {
		ci := h.next(e)
		if ci < 0 || containerTotal(e.alloc.Containers[ci]) != size {
			continue
		}
		out = append(out, candidate{e: e, ci: ci, listed: listed[e.ref()]})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.listed != b.listed {
			return a.listed
		}
		if a.e.assumeTime != b.e.assumeTime {
			return a.e.assumeTime < b.e.assumeTime
		}
		return a.e.ref() < b.e.ref()
	})
	return out
}

// byCard groups device IDs by card UUID, each group sorted by unit number;
// each ID is parsed once (a MiB node has tens of thousands). It fails on
// an ID that is malformed or on none of h's cards. It reads only h.cards,
// so the caller need not hold h.mu.
func (h *Handoff) byCard(ids []string) (map[string][]string, error) {
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
		if _, ok := h.cards[uuid]; !ok {
			return nil, fmt.Errorf("%w: %s is not on any card of node %s", ErrDeviceID, id, h.node)
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
// sorted by unit number (each ID goes to its slot: no sort), leaving out
// those in skip (IDs kubelet must include anyway) and those this plugin
// does not advertise (malformed, on none of h's cards, or past a card's
// units). Like byCard, it needs no lock.
func (h *Handoff) available(ids []string, skip map[string]bool) map[string][]string {
	out := map[string][]string{} // UUID -> IDs at their unit numbers
	for _, id := range ids {
		if skip[id] {
			continue
		}
		uuid, k, err := ParseDeviceID(id)
		if err != nil {
			continue
		}
		c, ok := h.cards[uuid]
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
func (h *Handoff) sharesOf(groups map[string][]string) []gpushare.DeviceShare {
	out := make([]gpushare.DeviceShare, 0, len(groups))
	for uuid, ids := range groups {
		out = append(out, gpushare.DeviceShare{Index: h.cards[uuid].Index, UUID: uuid, Units: int64(len(ids))})
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

// Prefer answers GetPreferredAllocation: size device IDs from available
// (which includes mustInclude) on the cards that the annotation of the
// container kubelet is most likely admitting names. See the package doc.
func (h *Handoff) Prefer(ctx context.Context, available, mustInclude []string, size int) ([]string, error) {
	// Parse and group the IDs once, before locking.
	forced, err := h.byCard(mustInclude)
	if err != nil {
		return nil, err
	}
	skip := make(map[string]bool, len(mustInclude))
	for _, id := range mustInclude {
		skip[id] = true
	}
	avail := h.available(available, skip)
	if len(mustInclude) > 0 {
		// IDs kubelet must include are an init container's, reused by the
		// next container of the same pod: they name the pod, so
		// PodResources need not be asked.
		h.mu.Lock()
		c, ok := h.reuser(mustInclude, int64(size))
		if ok {
			ids, err := h.prefer(ctx, []candidate{c}, avail, forced, int64(size), nil)
			h.mu.Unlock()
			return ids, err
		}
		h.mu.Unlock()
	}
	kp, lerr := h.listKubelet(ctx)
	failed := nonNil(lerr)
	for attempt := 0; ; attempt++ {
		h.mu.Lock()
		listed := h.observe(ctx, kp)
		ids, err := h.prefer(ctx, h.candidates(int64(size), listed), avail, forced, int64(size), listed)
		h.mu.Unlock()
		if errors.Is(err, ErrNoMatch) && attempt == 0 {
			// The informer may lag behind kubelet: catch up, then match
			// again even if the read failed (the informer may have
			// delivered the pod meanwhile).
			failed = append(failed, nonNil(h.catchUp(ctx))...)
			continue
		}
		return ids, withFailures(err, failed)
	}
}

// prefer chooses for Prefer among cands, the containers kubelet may be
// admitting (listed: the pods PodResources lists), and records the choice
// for the next Allocate. avail and forced are kubelet's free IDs and the
// IDs it must include, by card (see available and byCard). The caller
// holds h.mu.
func (h *Handoff) prefer(ctx context.Context, cands []candidate, avail, forced map[string][]string, size int64, listed map[string]bool) ([]string, error) {
	h.steer = nil
	if len(cands) == 0 {
		return nil, h.noMatch(size, listed)
	}
	// The first candidate whose annotated cards have room in kubelet's
	// accounting; else the first, on other cards (repaired afterwards).
	c, ids := cands[0], []string(nil)
	for _, cand := range cands {
		if ids = h.pick(cand.container(), avail, forced, false, nil); ids != nil {
			c = cand
			break
		}
	}
	if ids == nil && c.e.constraintsErr == nil {
		ids = h.pick(c.container(), avail, forced, true, c.e.constraints)
	}
	if ids == nil {
		ca := c.container()
		if c.e.constraintsErr != nil {
			return nil, fmt.Errorf("%w: pod %s container %s needs %d units on each of %d cards other than its annotation's, and its card annotations are invalid, so no card may take it: %w",
				ErrNoMatch, c.e.ref(), ca.Name, ca.Devices[0].Units, len(ca.Devices), c.e.constraintsErr)
		}
		if short := h.reusedShort(ca, avail, forced); short != "" {
			return nil, fmt.Errorf("%w: pod %s container %s needs %d units on each of %d cards; %s",
				ErrNoMatch, c.e.ref(), ca.Name, ca.Devices[0].Units, len(ca.Devices), short)
		}
		return nil, fmt.Errorf("%w: pod %s container %s needs %d units on each of %d cards%s and no such cards are free in kubelet's accounting (free units by card: %s)%s",
			ErrNoMatch, c.e.ref(), ca.Name, ca.Devices[0].Units, len(ca.Devices), describeConstraints(c.e.constraints), h.freeByCard(avail, forced), h.excludedCards(c.e.constraints))
	}
	h.steer = &steer{ids: slices.Sorted(slices.Values(ids)), ck: c.key()}
	if v := klog.FromContext(ctx).V(4); v.Enabled() {
		v.Info("Preferred devices", "pod", c.e.ref(), "container", c.container().Name, "units", size, "cards", h.describeIDs(ids))
	}
	return ids, nil
}

// reuser returns the next container of the pod whose init container holds
// ids, if it asks size units.
func (h *Handoff) reuser(ids []string, size int64) (candidate, bool) {
	var pod types.UID
	for _, id := range ids {
		o, ok := h.owner[id]
		if !ok || !h.isInit(o) || (pod != "" && o.uid != pod) {
			return candidate{}, false
		}
		pod = o.uid
	}
	e := h.pods[pod]
	if e == nil {
		return candidate{}, false
	}
	ci := h.next(e)
	if ci < 0 || containerTotal(e.alloc.Containers[ci]) != size {
		return candidate{}, false
	}
	return candidate{e: e, ci: ci, listed: true}, true
}

// pick chooses device IDs for container c: all of forced, plus the lowest
// free units of the cards c's annotation names, or (relocate) of other
// cards with room that the pod's constraints cc allow (allocator.Exclude;
// nil: any), best fit first. It returns nil when no set of len(c.Devices)
// cards with c's units each can be made.
//
// The operator's cordon (gpushare.io/cordoned-gpus) does not bind a
// relocation: it keeps the scheduler from sending new pods to a card, and
// this pod was scheduled already; kubelet's free devices, not a choice,
// move it, and refusing would fail a pod the cluster accepted.
func (h *Handoff) pick(c gpushare.ContainerAllocation, avail, forced map[string][]string, relocate bool, cc *gpushare.CardConstraints) []string {
	k, u := len(c.Devices), c.Devices[0].Units
	var chosen []string
	has := func(uuid string) bool { return slices.Contains(chosen, uuid) }
	room := func(uuid string) bool { return int64(len(avail[uuid])+len(forced[uuid])) >= u }
	for _, uuid := range h.sortedUUIDs(forced) {
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
			uuid = h.uuidOfIndex(d.Index)
		}
		if !has(uuid) && room(uuid) {
			chosen = append(chosen, uuid)
		}
	}
	if len(chosen) < k && relocate {
		others := []string{}
		for uuid := range h.cards {
			if !has(uuid) && room(uuid) && h.allows(cc, uuid) {
				others = append(others, uuid)
			}
		}
		sort.Slice(others, func(i, j int) bool {
			a, b := len(avail[others[i]]), len(avail[others[j]])
			if a != b {
				return a < b
			}
			return h.cards[others[i]].Index < h.cards[others[j]].Index
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
				return d.UUID == uuid || (d.UUID == "" && h.cards[uuid].Index == d.Index)
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

// allows reports whether a pod with constraints cc may use card uuid
// (allocator.Exclude, on the card's model, UUID and isolation).
func (h *Handoff) allows(cc *gpushare.CardConstraints, uuid string) bool {
	if cc == nil {
		return true
	}
	c := h.cards[uuid]
	return allocator.Exclude(cc, &allocator.Card{Info: &allocator.CardInfo{UUID: c.UUID, Model: c.Model, Isolation: c.Isolation}}) == allocator.Eligible
}

// allowsShares reports whether pod e's card annotations allow every card
// of shares (false when they are invalid).
func (h *Handoff) allowsShares(e *podEntry, shares []gpushare.DeviceShare) bool {
	if e.constraintsErr != nil {
		return false
	}
	for _, s := range shares {
		if !h.allows(e.constraints, s.UUID) {
			return false
		}
	}
	return true
}

// excludedCards lists the cards a pod with constraints cc may not use, for
// an admission error: "; the pod's card annotations exclude card 0 (Tesla
// T4), card 1 (Tesla T4)"; "" when none.
func (h *Handoff) excludedCards(cc *gpushare.CardConstraints) string {
	var parts []string
	for _, c := range h.sortedCards() {
		if !h.allows(cc, c.UUID) {
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

// reusedShort explains why the IDs kubelet must include (an init
// container's, which kubelet reuses) cannot be part of an answer for c:
// a card of them has fewer than c's units free and forced together, or
// they span more cards than c asks. "" when neither holds.
func (h *Handoff) reusedShort(c gpushare.ContainerAllocation, avail, forced map[string][]string) string {
	u := c.Devices[0].Units
	uuids := h.sortedUUIDs(forced)
	if len(uuids) > len(c.Devices) {
		return fmt.Sprintf("kubelet must include units of %d cards (reused from the pod's init containers)", len(uuids))
	}
	for _, uuid := range uuids {
		if int64(len(forced[uuid])+len(avail[uuid])) < u {
			return fmt.Sprintf("kubelet must include %d units of card %d (reused from the pod's init containers) and has %d more free there",
				len(forced[uuid]), h.cards[uuid].Index, len(avail[uuid]))
		}
	}
	return ""
}

func (h *Handoff) uuidOfIndex(index int) string {
	for uuid, c := range h.cards {
		if c.Index == index {
			return uuid
		}
	}
	return ""
}

func (h *Handoff) sortedUUIDs(m map[string][]string) []string {
	out := make([]string, 0, len(m))
	for uuid := range m {
		out = append(out, uuid)
	}
	sort.Slice(out, func(i, j int) bool { return h.cards[out[i]].Index < h.cards[out[j]].Index })
	return out
}

func (h *Handoff) freeByCard(avail, forced map[string][]string) string {
	var parts []string
	for _, c := range h.sortedCards() {
		parts = append(parts, fmt.Sprintf("card %d: %d", c.Index, len(avail[c.UUID])+len(forced[c.UUID])))
	}
	return strings.Join(parts, ", ")
}

func (h *Handoff) sortedCards() []Card {
	out := make([]Card, 0, len(h.cards))
	for _, c := range h.cards {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Index < out[j].Index })
	return out
}

func (h *Handoff) describeIDs(ids []string) string {
	groups, err := h.byCard(ids)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, s := range h.sharesOf(groups) {
		parts = append(parts, fmt.Sprintf("card %d: %d", s.Index, s.Units))
	}
	return strings.Join(parts, ", ")
}

// noMatch explains why no container waits for size units. The caller
// holds h.mu.
func (h *Handoff) noMatch(size int64, listed map[string]bool) error {
	var waiting, problems, listedProblems []string
	for _, e := range h.pods {
		if h.legacy[e.uid] != nil {
			continue // admitted through the previous plugin
		}
		if e.problem != "" {
			p := fmt.Sprintf("pod %s cannot be matched: %s", e.ref(), e.problem)
			if listed[e.ref()] {
				listedProblems = append(listedProblems, p) // kubelet is admitting it
			} else if len(problems) < 3 {
				problems = append(problems, p)
			}
			continue
		}
		if ci := h.next(e); ci >= 0 && len(waiting) < 5 {
			c := e.alloc.Containers[ci]
			waiting = append(waiting, fmt.Sprintf("%s container %s (%d units)", e.ref(), c.Name, containerTotal(c)))
		}
	}
	sort.Strings(waiting)
	sort.Strings(problems)
	msg := fmt.Sprintf("%v: no container on node %s waits for %d %s", ErrNoMatch, h.node, size, h.unit)
	if len(waiting) > 0 {
		msg += "; waiting: " + strings.Join(waiting, ", ")
	}
	sort.Strings(listedProblems)
	listedProblems = append(listedProblems, problems...)
	if len(listedProblems) > 0 {
		msg += "; " + strings.Join(listedProblems, "; ")
	}
	return &matchError{msg: msg}
}

type matchError struct{ msg string }

func (e *matchError) Error() string        { return e.msg }
func (e *matchError) Is(target error) bool { return target == ErrNoMatch }

// Allocate matches the device IDs kubelet allocated for one container to
// the container they are for and records the grant. The container's cards
// are always those of the IDs (kubelet's accounting is what keeps cards
// from over-commit); when they differ from the annotation, the
// annotation is repaired. See the package doc.
func (h *Handoff) Allocate(ctx context.Context, ids []string) (*Assignment, error) {
	groups, err := h.byCard(ids)
	if err != nil {
		return nil, err
	}
	ids = slices.Sorted(slices.Values(ids))
	// The usual case: the IDs are those GetPreferredAllocation just chose,
	// for a container it chose with kubelet's view at hand.
	h.mu.Lock()
	if h.steered(ids) {
		a, err := h.allocate(ctx, nil, ids, groups)
		h.mu.Unlock()
		return a, err
	}
	h.mu.Unlock()
	kp, lerr := h.listKubelet(ctx)
	failed := nonNil(lerr)
	for attempt := 0; ; attempt++ {
		h.mu.Lock()
		a, err := h.allocate(ctx, kp, ids, groups)
		h.mu.Unlock()
		if errors.Is(err, ErrNoMatch) && attempt == 0 {
			failed = append(failed, nonNil(h.catchUp(ctx))...) // as in Prefer
			continue
		}
		return a, withFailures(err, failed)
	}
}

// steered reports whether sorted ids are those the last Prefer chose. The
// caller holds h.mu.
func (h *Handoff) steered(ids []string) bool {
	return h.steer != nil && slices.Equal(h.steer.ids, ids)
}

// allocate decides for Allocate: ids are kubelet's device IDs, sorted, and
// groups the same by card. The caller holds h.mu.
func (h *Handoff) allocate(ctx context.Context, kp []KubeletPod, ids []string, groups map[string][]string) (*Assignment, error) {
	logger := klog.FromContext(ctx)
	listed := h.observe(ctx, kp)
	size := int64(len(ids))
	shares := h.sharesOf(groups)
	st, steered := h.steer, h.steered(ids)
	h.steer = nil

	var pick *candidate
	how := ""
	if steered {
		if e := h.pods[st.ck.uid]; e != nil {
			if ci := h.next(e); ci >= 0 && e.alloc.Containers[ci].Name == st.ck.name {
				pick, how = &candidate{e: e, ci: ci}, "steered"
			}
		}
	}
	if pick == nil {
		if c, ok := h.reuser(ids, size); ok {
			pick, how = &c, "reused"
		}
	}
	if pick == nil {
		cands := h.candidates(size, listed)
		// Exact: annotated on these very cards; then same shape elsewhere.
		for i := range cands {
			if sameShares(cands[i].container().Devices, shares) {
				pick, how = &cands[i], "matched"
				break
			}
		}
		if pick == nil {
			for i := range cands {
				if fitsShape(shares, cands[i].container()) && h.allowsShares(cands[i].e, shares) {
					pick, how = &cands[i], "matched"
					break
				}
			}
		}
		if pick == nil && len(cands) > 0 {
			pick = &cands[0]
		}
	}
	if pick == nil {
		return nil, h.noMatch(size, listed)
	}
	c := pick.container()
	if !fitsShape(shares, c) {
		return nil, fmt.Errorf("%w: kubelet allocated %d units on %s for pod %s container %s, which needs %d units on each of %d cards; "+
			"kubelet's accounting has no such cards free (the pod's init containers, whose devices kubelet reuses, may be on other cards)",
			ErrNoMatch, size, h.describeIDs(ids), pick.e.ref(), c.Name, c.Devices[0].Units, len(c.Devices))
	}
	if !sameShares(c.Devices, shares) && !h.allowsShares(pick.e, shares) {
		if pick.e.constraintsErr != nil {
			return nil, fmt.Errorf("%w: kubelet allocated %d units on %s for pod %s container %s, other cards than its annotation's, and its card annotations are invalid, so no card may take it: %w",
				ErrNoMatch, size, h.describeIDs(ids), pick.e.ref(), c.Name, pick.e.constraintsErr)
		}
		return nil, fmt.Errorf("%w: kubelet allocated %d units on %s for pod %s container %s, which asks cards %s%s",
			ErrNoMatch, size, h.describeIDs(ids), pick.e.ref(), c.Name, pick.e.constraints, h.excludedCards(pick.e.constraints))
	}
	ck := pick.key()
	for _, id := range ids {
		if o, ok := h.owner[id]; ok && o.uid != ck.uid {
			h.correct(ctx, o, ck.uid)
		}
	}
	if err := h.checkMPSUserLocked(ck, shares); err != nil {
		return nil, err
	}
	h.give(ck, &grant{ids: ids, shares: shares, at: h.clock.Now()})
	h.stats.Allocations++
	switch how {
	case "steered":
		h.stats.Steered++
	case "reused":
		h.stats.Reused++
	}
	a := &Assignment{Pod: ck.uid, Namespace: pick.e.namespace, PodName: pick.e.name, Container: c.Name, Shares: shares,
		Enforced: pick.e.constraints != nil && pick.e.constraints.Enforced}
	if !sameShares(c.Devices, shares) {
		a.Relocated = true
		h.stats.Relocated++
		logger.Info("Container placed on other cards than its annotation names; repairing the annotation",
			"pod", pick.e.ref(), "container", c.Name, "annotated", DescribeShares(c.Devices), "actual", DescribeShares(shares), "how", how)
		if h.recorder != nil {
			h.recorder.Eventf(podRef(pick.e), corev1.EventTypeWarning, "GPUAllocationRepaired",
				"container %s runs on %s, not on %s as scheduled: kubelet's free devices decided; the allocation annotation now says so",
				c.Name, DescribeShares(shares), DescribeShares(c.Devices))
		}
	}
	a.PodUnits = h.repaired(pick.e).Total()
	if v := logger.V(4); v.Enabled() {
		v.Info("Allocated", "pod", pick.e.ref(), "container", c.Name, "cards", DescribeShares(shares), "how", how)
	}
	h.notify(ck.uid)
	return a, nil
}

func podRef(e *podEntry) *corev1.Pod {
	p := &corev1.Pod{}
	p.Name, p.Namespace, p.UID = e.name, e.namespace, e.uid
	return p
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
