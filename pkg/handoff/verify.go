package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// observe applies kubelet's view: IDs kubelet holds for a container are
// that container's, whoever the plugin had given them to; a grant younger
// than the grace period stands even if kubelet does not show it yet. It
// returns the names of the pods kubelet lists. The caller holds h.mu.
func (h *Handoff) observe(ctx context.Context, kp []KubeletPod) map[string]bool {
	logger := klog.FromContext(ctx)
	now := h.clock.Now()
	listed := make(map[string]bool, len(kp))
	for _, lp := range kp {
		ref := lp.Namespace + "/" + lp.Name
		listed[ref] = true
		uid, ok := h.byName[ref]
		if !ok || h.observeLegacy(ctx, uid, lp) {
			continue
		}
		for cname, ids := range lp.Containers {
			ck := containerKey{uid, cname}
			g := h.grants[ck]
			sorted := slices.Sorted(slices.Values(ids))
			if g != nil && len(sorted) > 0 && slices.Equal(g.ids, sorted) {
				// Nothing changed (g.ids holds only valid IDs of h's
				// cards): no need to parse them again.
				g.confirmed = true
				continue
			}
			mine := slices.DeleteFunc(sorted, func(id string) bool {
				uuid, _, err := ParseDeviceID(id)
				_, ok := h.cards.byUUID[uuid]
				return err != nil || !ok
			})
			if len(mine) == 0 {
				if g != nil && !g.confirmed && g.ids != nil && now.Sub(g.at) < h.grace {
					continue // Allocate just answered; kubelet records it after.
				}
				if g != nil && !g.confirmed && !h.isInit(ck) {
					logger.V(2).Info("kubelet holds no devices for a container the plugin had matched; it waits again", "pod", ref, "container", cname)
					h.drop(ck)
					h.notify(uid)
				}
				continue
			}
			groups, _ := h.cards.byCard(mine)
			for _, id := range mine {
				if o, ok := h.owner[id]; ok && o != ck && o.uid != uid {
					h.correct(ctx, o, uid)
				}
			}
			h.give(ck, &grant{ids: mine, shares: h.cards.sharesOf(groups), confirmed: true, at: now})
			if g != nil && g.ids != nil {
				h.stats.Corrected++
				logger.Info("kubelet gave this container other devices than the plugin had matched to it; following kubelet", "pod", ref, "container", cname)
			}
			h.notify(uid)
		}
	}
	return listed
}

// correct drops the grant of container o, whose IDs kubelet holds for a
// container of pod claimant: the plugin's match was a guess that kubelet
// applied to another pod. An init container's grant moves to the claimant's
// init container of the same size, if it has one without a grant. kubelet
// lets app containers reuse their pod's init devices, so this is the only
// way the plugin learns where an init container ran. The caller holds h.mu.
func (h *Handoff) correct(ctx context.Context, o containerKey, claimant types.UID) {
	g := h.grants[o]
	h.drop(o)
	h.notify(o.uid)
	h.stats.Corrected++
	klog.FromContext(ctx).V(2).Info("A match was a guess that kubelet applied to another pod; correcting", "pod", h.refOf(o.uid), "container", o.name, "ownerPod", h.refOf(claimant))
	if g == nil || !h.isInit(o) {
		return
	}
	e := h.pods[claimant]
	if e == nil || e.alloc == nil {
		return
	}
	var size int64
	for _, s := range g.shares {
		size += s.Units
	}
	for _, c := range e.alloc.Containers {
		ck := containerKey{claimant, c.Name}
		if c.Init && h.grants[ck] == nil && containerTotal(c) == size {
			h.give(ck, &grant{ids: g.ids, shares: g.shares, at: g.at})
			return
		}
	}
}

// Verify reads kubelet's PodResources and corrects the grants by it; the
// annotation writer then repairs what differs. It returns the number of
// pods kubelet lists, or an error when PodResources is unavailable.
func (h *Handoff) Verify(ctx context.Context) (int, error) {
	if h.kubelet == nil {
		return 0, errors.New("no PodResources client")
	}
	kp, err := h.kubelet.List(ctx)
	if err != nil {
		return 0, fmt.Errorf("listing kubelet's pod resources: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.observe(ctx, kp)
	return len(kp), nil
}

// verifyDebounce is how long after an Allocate the verifier reads
// PodResources: kubelet records the devices once Allocate has returned.
const verifyDebounce = 300 * time.Millisecond

// RunVerifier compares kubelet's PodResources with the grants until ctx
// ends: shortly after each Allocate's delivery on now, and every period.
// It then calls verified, which prunes what no grant holds any more.
func (h *Handoff) RunVerifier(ctx context.Context, period time.Duration, now <-chan struct{}, verified func(context.Context)) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(period)
	defer t.Stop()
	reported := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-now:
			select {
			case <-ctx.Done():
				return
			case <-time.After(verifyDebounce):
			}
		}
		if _, err := h.Verify(ctx); err != nil {
			if !reported {
				logger.Info("Cannot read kubelet's PodResources; allocations are not verified against kubelet until it answers", "err", err)
				reported = true
			}
			continue
		}
		if reported {
			logger.Info("kubelet's PodResources answers again")
			reported = false
		}
		verified(ctx)
	}
}
