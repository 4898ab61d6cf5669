package handoff

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Pods admitted by the previous device plugin (Aliyun's) and the device
// IDs kubelet holds for them: see "Pods of the previous device plugin" in
// docs/design/device-plugin.md.

// startupReads is how many times AdoptAtStart reads PodResources before
// the first registration.
const startupReads = 3

// maxNamedPods is how many pods an error names before it counts the rest.
const maxNamedPods = 10

// startupReadPause is the pause between those reads (a variable for tests).
var startupReadPause = time.Second

// LegacyPod is a pod on this node whose devices kubelet allocated through
// the previous device plugin of aliyun.com/gpu-mem.
type LegacyPod struct {
	// Pod is "namespace/name".
	Pod string
	// Card is the index of the card it runs on, -1 when none is known. On
	// a node with several cards, an ALIYUN_COM_GPU_MEM_IDX that names none
	// of them means Aliyun's plugin gave the pod no card.
	Card int
	// Units is the number of device IDs kubelet holds for it (its app
	// and restartable init containers; PodResources lists no others).
	Units int64
}

// Adoption is what the plugin advertises for legacy pods.
type Adoption struct {
	// ByCard: card UUID -> the previous plugin's device IDs that kubelet
	// holds for the pods on that card, sorted. The server advertises them
	// as that card's units, in place of as many of its own.
	ByCard map[string][]string
	// Pods sorted by name.
	Pods []LegacyPod
}

// LegacyChanged delivers after the set of legacy pods or their devices
// changed; Adoption tells the new state.
func (h *Handoff) LegacyChanged() <-chan struct{} { return h.legacyChanged }

// pokeLegacy signals LegacyChanged without blocking.
func (h *Handoff) pokeLegacy() {
	select {
	case h.legacyChanged <- struct{}{}:
	default:
	}
}

// isOurs reports whether id is a device ID of one of h's cards.
func (h *Handoff) isOurs(id string) bool {
	uuid, _, err := ParseDeviceID(id)
	if err != nil {
		return false
	}
	_, ok := h.cards.byUUID[uuid]
	return ok
}

// foreignIDs returns the device IDs kubelet lists for pod uid that are not
// this plugin's, sorted. Containers whose grant holds exactly the listed
// IDs are skipped unparsed (a MiB node lists tens of thousands).
func (h *Handoff) foreignIDs(uid types.UID, lp KubeletPod) []string {
	var out []string
	for name, ids := range lp.Containers {
		if g := h.grants[containerKey{uid, name}]; g != nil && g.ids != nil && len(g.ids) == len(ids) &&
			slices.Equal(g.ids, slices.Sorted(slices.Values(ids))) {
			continue
		}
		for _, id := range ids {
			if !h.isOurs(id) {
				out = append(out, id)
			}
		}
	}
	slices.Sort(out)
	return out
}

// observeLegacy records whether kubelet holds devices of the previous
// plugin for pod uid, as lp lists it, and reports whether it does: such a
// pod is never matched, granted or patched. The caller holds h.mu.
func (h *Handoff) observeLegacy(ctx context.Context, uid types.UID, lp KubeletPod) bool {
	foreign := h.foreignIDs(uid, lp)
	old, was := h.legacy[uid]
	if len(foreign) == 0 {
		if was && len(lp.Containers) > 0 {
			// Listed again without them: kubelet released them.
			delete(h.legacy, uid)
			h.pokeLegacy()
		}
		return false
	}
	if !was || !slices.Equal(old, foreign) {
		h.legacy[uid] = foreign
		h.pokeLegacy()
	}
	if !was {
		klog.FromContext(ctx).V(2).Info("kubelet holds devices of the previous device plugin for this pod; it is left as it is",
			"pod", h.refOf(uid), "devices", len(foreign))
	}
	// A restarted plugin restores grants from ASSIGNED=true; the previous
	// plugin wrote that flag too, so such grants are not ours.
	for ck := range h.grants {
		if ck.uid == uid {
			h.drop(ck)
		}
	}
	return true
}

// legacyCard returns the card pod e runs on by its Aliyun annotation, or
// false. Aliyun's plugin gave a pod the card ALIYUN_COM_GPU_MEM_IDX names,
// and on a one-card node that card without looking at the pod.
func (h *Handoff) legacyCard(e *podEntry) (Card, bool) {
	for _, c := range h.cards.byUUID {
		if e != nil && c.Index == e.index {
			return c, true
		}
	}
	if len(h.cards.byUUID) == 1 {
		for _, c := range h.cards.byUUID {
			return c, true
		}
	}
	return Card{}, false
}

// Adoption returns the device IDs to advertise for legacy pods, by card.
func (h *Handoff) Adoption() Adoption {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := Adoption{ByCard: map[string][]string{}}
	for uid, ids := range h.legacy {
		e := h.pods[uid]
		lp := LegacyPod{Pod: h.refOf(uid), Card: -1, Units: int64(len(ids))}
		if c, ok := h.legacyCard(e); ok {
			lp.Card = c.Index
			a.ByCard[c.UUID] = append(a.ByCard[c.UUID], ids...)
		}
		a.Pods = append(a.Pods, lp)
	}
	for uuid := range a.ByCard {
		slices.Sort(a.ByCard[uuid])
	}
	sort.Slice(a.Pods, func(i, j int) bool { return a.Pods[i].Pod < a.Pods[j].Pod })
	return a
}

// mayHoldDevices returns the pods that kubelet may have admitted already
// (running, ASSIGNED=true, or scheduled without our allocation), whose
// devices only PodResources tells.
func (h *Handoff) mayHoldDevices() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, e := range h.pods {
		if e.admitted || e.alloc == nil || e.annotations[gpushare.AnnotationAssigned] == "true" {
			out = append(out, e.ref())
		}
	}
	sort.Strings(out)
	return out
}

// checkLegacyUnit refuses a unit other than the one the legacy pods were
// placed in. ALIYUN_COM_GPU_MEM_DEV is the card's memory in the unit
// Aliyun's components ran with; a factor of about 1024 against the card's
// units in ours means the other unit, and the pods' requests and kubelet's
// device IDs count that unit. The caller holds h.mu.
func (h *Handoff) checkLegacyUnit() error {
	var refs []string
	for uid := range h.legacy {
		refs = append(refs, h.refOf(uid))
	}
	sort.Strings(refs)
	for _, ref := range refs {
		e := h.pods[h.byName[ref]]
		c, ok := h.legacyCard(e)
		if e == nil || !ok || e.devMem <= 0 {
			continue
		}
		other := ""
		switch {
		case h.unit == gpushare.UnitGiB && e.devMem >= 512*c.Units:
			other = gpushare.UnitMiB
		case h.unit == gpushare.UnitMiB && 512*e.devMem <= c.Units:
			other = gpushare.UnitGiB
		}
		if other != "" {
			return fmt.Errorf("node %s: pod %s was placed by Aliyun's gpushare in %s (%s=%d for card %d, which has %d %s here); its request and the device IDs kubelet holds for it count %s. "+
				"Start the plugin with --memory-unit %s, the unit Aliyun's device plugin ran with",
				h.node, ref, other, gpushare.AnnotationDevMem, e.devMem, c.Index, c.Units, h.unit, other, other)
		}
	}
	return nil
}

// AdoptAtStart reads kubelet's PodResources before the plugin first
// registers, so that the first device list already holds the legacy pods'
// devices on their cards. It refuses to go on when kubelet does not answer
// and pods on the node may hold devices: the plugin would advertise units
// those pods use. It also refuses when the legacy pods were placed in the
// other unit.
func (h *Handoff) AdoptAtStart(ctx context.Context) error {
	var err error
	for i := 0; i < startupReads; i++ {
		if _, err = h.Verify(ctx); err == nil || i == startupReads-1 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("reading kubelet's PodResources at start: %w", ctx.Err())
		case <-time.After(startupReadPause):
		}
	}
	if err != nil {
		pods := h.mayHoldDevices()
		if len(pods) > 0 {
			named := strings.Join(pods[:min(len(pods), maxNamedPods)], ", ")
			if len(pods) > maxNamedPods {
				named += fmt.Sprintf(" and %d more", len(pods)-maxNamedPods)
			}
			return fmt.Errorf("node %s: kubelet may hold %s devices for %d pod(s) (%s), and which ones cannot be told: %w; "+
				"the plugin starts once kubelet's PodResources answers (a previous device plugin's devices must be known before this one registers)",
				h.node, gpushare.ResourceGPUMem, len(pods), named, err)
		}
		klog.FromContext(ctx).Info("kubelet's PodResources does not answer; no pod on the node holds devices, so the plugin starts", "err", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.checkLegacyUnit()
}
