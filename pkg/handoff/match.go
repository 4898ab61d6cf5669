package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

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

// Prefer answers GetPreferredAllocation: size device IDs from available
// (which includes mustInclude) on the cards that the annotation of the
// container kubelet is most likely admitting names. See the package doc.
func (h *Handoff) Prefer(ctx context.Context, available, mustInclude []string, size int) ([]string, error) {
	// Parse and group the IDs once, before locking.
	forced, err := h.cards.byCard(mustInclude)
	if err != nil {
		return nil, err
	}
	skip := make(map[string]bool, len(mustInclude))
	for _, id := range mustInclude {
		skip[id] = true
	}
	avail := h.cards.available(available, skip)
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
// admitting, and records the choice for the next Allocate. listed holds the
// pods PodResources lists. avail and forced are kubelet's free IDs and the
// IDs it must include, by card, from available and byCard. The caller holds
// h.mu.
func (h *Handoff) prefer(ctx context.Context, cands []candidate, avail, forced map[string][]string, size int64, listed map[string]bool) ([]string, error) {
	h.steer = nil
	if len(cands) == 0 {
		return nil, h.noMatch(size, listed)
	}
	// The first candidate whose annotated cards have room in kubelet's
	// accounting; else the first, on other cards (repaired afterwards).
	c, ids := cands[0], []string(nil)
	for _, cand := range cands {
		if ids = h.cards.pick(cand.container(), avail, forced, false, nil); ids != nil {
			c = cand
			break
		}
	}
	if ids == nil && c.e.constraintsErr == nil {
		ids = h.cards.pick(c.container(), avail, forced, true, c.e.constraints)
	}
	if ids == nil {
		ca := c.container()
		if c.e.constraintsErr != nil {
			return nil, fmt.Errorf("%w: pod %s container %s needs %d units on each of %d cards other than its annotation's, and its card annotations are invalid, so no card may take it: %w",
				ErrNoMatch, c.e.ref(), ca.Name, ca.Devices[0].Units, len(ca.Devices), c.e.constraintsErr)
		}
		if short := h.cards.reusedShort(ca, avail, forced); short != "" {
			return nil, fmt.Errorf("%w: pod %s container %s needs %d units on each of %d cards; %s",
				ErrNoMatch, c.e.ref(), ca.Name, ca.Devices[0].Units, len(ca.Devices), short)
		}
		return nil, fmt.Errorf("%w: pod %s container %s needs %d units on each of %d cards%s and no such cards are free in kubelet's accounting (free units by card: %s)%s",
			ErrNoMatch, c.e.ref(), ca.Name, ca.Devices[0].Units, len(ca.Devices), describeConstraints(c.e.constraints), h.cards.freeByCard(avail, forced), h.cards.excludedCards(c.e.constraints))
	}
	h.steer = &steer{ids: slices.Sorted(slices.Values(ids)), ck: c.key()}
	if v := klog.FromContext(ctx).V(4); v.Enabled() {
		v.Info("Preferred devices", "pod", c.e.ref(), "container", c.container().Name, "units", size, "cards", h.cards.describeIDs(ids))
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
	groups, err := h.cards.byCard(ids)
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
	shares := h.cards.sharesOf(groups)
	st, steered := h.steer, h.steered(ids)
	h.steer = nil

	pick, how := h.choose(st, steered, ids, shares, listed)
	if pick == nil {
		return nil, h.noMatch(size, listed)
	}
	if err := h.refuse(pick, ids, shares); err != nil {
		return nil, err
	}
	c := pick.container()
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

// choose returns the container kubelet's ids are for, and how it was found.
// ids are sorted; shares are the same by card. It tries three strategies in
// turn:
//
//   - "steered": with steered, st's container, which the last preference
//     was for;
//   - "reused": the next container of the pod whose init container holds
//     the IDs;
//   - matched: a waiting container of their size.
//
// It returns nil when none waits. The caller holds h.mu.
func (h *Handoff) choose(st *steer, steered bool, ids []string, shares []gpushare.DeviceShare, listed map[string]bool) (*candidate, string) {
	if steered {
		if c := h.steeredTo(st); c != nil {
			return c, "steered"
		}
	}
	if c, ok := h.reuser(ids, int64(len(ids))); ok {
		return &c, "reused"
	}
	return h.matched(int64(len(ids)), shares, listed)
}

// steeredTo returns the container st was preferred for, if it is still
// its pod's next. The caller holds h.mu.
func (h *Handoff) steeredTo(st *steer) *candidate {
	e := h.pods[st.ck.uid]
	if e == nil {
		return nil
	}
	if ci := h.next(e); ci >= 0 && e.alloc.Containers[ci].Name == st.ck.name {
		return &candidate{e: e, ci: ci}
	}
	return nil
}

// matched chooses among the waiting containers of size units, listed pods
// first. It returns the one annotated on exactly shares' cards, else one of
// their shape whose pod's card annotations allow them; both are "matched".
// Else it returns the first with "", which refuse then rejects unless the
// IDs suit it. It returns nil when none waits. The caller holds h.mu.
func (h *Handoff) matched(size int64, shares []gpushare.DeviceShare, listed map[string]bool) (*candidate, string) {
	cands := h.candidates(size, listed)
	// Exact: annotated on these very cards; then same shape elsewhere.
	for i := range cands {
		if sameShares(cands[i].container().Devices, shares) {
			return &cands[i], "matched"
		}
	}
	for i := range cands {
		if fitsShape(shares, cands[i].container()) && h.cards.allowsShares(cands[i].e, shares) {
			return &cands[i], "matched"
		}
	}
	if len(cands) > 0 {
		return &cands[0], ""
	}
	return nil, ""
}

// refuse returns why kubelet's ids cannot go to pick's container; shares
// are the same by card. They may not form its shape. Or they may lie on
// cards other than its annotation's that its pod's card annotations do not
// allow. nil when they can.
func (h *Handoff) refuse(pick *candidate, ids []string, shares []gpushare.DeviceShare) error {
	c := pick.container()
	size := len(ids)
	if !fitsShape(shares, c) {
		return fmt.Errorf("%w: kubelet allocated %d units on %s for pod %s container %s, which needs %d units on each of %d cards; "+
			"kubelet's accounting has no such cards free (the pod's init containers, whose devices kubelet reuses, may be on other cards)",
			ErrNoMatch, size, h.cards.describeIDs(ids), pick.e.ref(), c.Name, c.Devices[0].Units, len(c.Devices))
	}
	if !sameShares(c.Devices, shares) && !h.cards.allowsShares(pick.e, shares) {
		if pick.e.constraintsErr != nil {
			return fmt.Errorf("%w: kubelet allocated %d units on %s for pod %s container %s, other cards than its annotation's, and its card annotations are invalid, so no card may take it: %w",
				ErrNoMatch, size, h.cards.describeIDs(ids), pick.e.ref(), c.Name, pick.e.constraintsErr)
		}
		return fmt.Errorf("%w: kubelet allocated %d units on %s for pod %s container %s, which asks cards %s%s",
			ErrNoMatch, size, h.cards.describeIDs(ids), pick.e.ref(), c.Name, pick.e.constraints, h.cards.excludedCards(pick.e.constraints))
	}
	return nil
}

func podRef(e *podEntry) *corev1.Pod {
	p := &corev1.Pod{}
	p.Name, p.Namespace, p.UID = e.name, e.namespace, e.uid
	return p
}

// Revoke takes back the grant Allocate made for a, unless kubelet has
// confirmed it since or another Allocate replaced it. It is for an Allocate
// call that failed after the match, in enforcing the container's limit.
// kubelet then frees the device IDs and will ask again. The pod's annotation
// repair, if a relocation asked one, is recomputed without the grant.
func (h *Handoff) Revoke(ctx context.Context, a *Assignment) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ck := containerKey{a.Pod, a.Container}
	g := h.grants[ck]
	if g == nil || g.confirmed || !sameShares(g.shares, a.Shares) {
		return
	}
	h.drop(ck)
	h.stats.Revoked++
	klog.FromContext(ctx).Info("Grant taken back: the Allocate call failed", "pod", a.Namespace+"/"+a.PodName, "container", a.Container,
		"cards", DescribeShares(a.Shares))
	if a.Relocated {
		h.notify(a.Pod)
	}
}

// listKubelet asks PodResources, without h.mu held. An error disables the
// hint for this call only; it is returned to go in the call's error if
// the match then fails.
func (h *Handoff) listKubelet(ctx context.Context) ([]KubeletPod, error) {
	if h.kubelet == nil {
		return nil, nil
	}
	kp, err := h.kubelet.List(ctx)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("PodResources unavailable; matching without kubelet's view", "err", err)
		return nil, fmt.Errorf("listing kubelet's pod resources: %w", err)
	}
	return kp, nil
}

// withFailures adds to a failed match the reads that failed on the way,
// which may be why nothing matched; kubelet shows the message as the
// pod's admission error.
func withFailures(err error, failed []error) error {
	if err == nil || len(failed) == 0 {
		return err
	}
	msgs := make([]string, len(failed))
	for i, f := range failed {
		msgs[i] = f.Error()
	}
	return fmt.Errorf("%w; %s", err, strings.Join(msgs, "; "))
}

// nonNil returns err as a one-element list, or nil.
func nonNil(err error) []error {
	if err == nil {
		return nil
	}
	return []error{err}
}
