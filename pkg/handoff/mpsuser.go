package handoff

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// ErrMPSUser marks an Allocate refused because the container would join
// MPS clients of another Linux user on its card. The card's MPS server
// serves one user at a time. The control daemon holds a client of another
// user until every client of the card has exited. So the container would
// hang at CUDA init rather than fail.
var ErrMPSUser = errors.New("another Linux user's MPS clients hold the card")

// runAsUsers returns the effective runAsUser of each container of pod
// (container name -> UID): the container's securityContext.runAsUser,
// else the pod's. A container that sets neither is absent: it runs as its
// image's user, which the plugin cannot see.
func runAsUsers(pod *corev1.Pod) map[string]int64 {
	users := map[string]int64{}
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if u, ok := gpushare.RunAsUser(pod, &cs[i]); ok {
				users[cs[i].Name] = u
			}
		}
	}
	return users
}

// mpsClient is a container that talks to its card's MPS daemon: one whose
// only card is in mps mode.
type mpsClient struct {
	// pod is "namespace/name".
	pod, container string
	// uid is the container's runAsUser when known is true; known is false
	// when neither it nor its pod sets one (the image's user decides).
	uid   int64
	known bool
}

// user describes c's Linux user: "runAsUser 1000", or "no runAsUser: its
// image's user".
func (c mpsClient) user() string {
	if !c.known {
		return "no runAsUser: its image's user"
	}
	return "runAsUser " + strconv.FormatInt(c.uid, 10)
}

// sameUser reports whether a and b run as one user as far as the plugin
// can tell: both with the same runAsUser, or both without one. Two
// containers without one may still differ (their images' USER lines);
// the plugin cannot see that, and lets them share.
func sameUser(a, b mpsClient) bool {
	return a.known == b.known && (!a.known || a.uid == b.uid)
}

// checkMPSUser returns nil when c may join others, the MPS clients of card.
// Otherwise it returns an ErrMPSUser error naming c, the card, both users,
// the fix, and the first client of another user by pod and container name.
func checkMPSUser(card Card, c mpsClient, others []mpsClient) error {
	sort.Slice(others, func(i, j int) bool {
		if others[i].pod != others[j].pod {
			return others[i].pod < others[j].pod
		}
		return others[i].container < others[j].container
	})
	for _, o := range others {
		if sameUser(c, o) {
			continue
		}
		return fmt.Errorf("%w: pod %s container %s (%s) cannot share MPS card %d (%s) with pod %s container %s (%s): "+
			"an MPS server serves one Linux user at a time, so the container would hang at CUDA init until every other client of the card exits; "+
			"give the pods that share mps cards the same securityContext.runAsUser, or let this pod run on another card",
			ErrMPSUser, c.pod, c.container, c.user(), card.Index, card.UUID, o.pod, o.container, o.user())
	}
	return nil
}

// mpsClientLocked returns the container ck as an MPS client. It returns
// false when its cards, shares, do not make it one: it is not on exactly one
// card, or that card is not in mps mode. The caller holds h.mu.
func (h *Handoff) mpsClientLocked(ck containerKey, shares []gpushare.DeviceShare) (mpsClient, bool) {
	if len(shares) != 1 || h.cards.byUUID[shares[0].UUID].Isolation != gpushare.IsolationMPS {
		return mpsClient{}, false
	}
	c := mpsClient{pod: h.refOf(ck.uid), container: ck.name}
	if e := h.pods[ck.uid]; e != nil {
		c.uid, c.known = e.users[ck.name]
	}
	return c, true
}

// checkMPSUserLocked returns checkMPSUser's verdict for container ck
// granted shares, against every other container granted the same mps card
// alone. Plain init containers do not count: they ran to completion before
// their pod's app containers started. Containers off mps cards pass. The
// caller holds h.mu.
func (h *Handoff) checkMPSUserLocked(ck containerKey, shares []gpushare.DeviceShare) error {
	c, ok := h.mpsClientLocked(ck, shares)
	if !ok {
		return nil
	}
	var others []mpsClient
	for other, g := range h.grants {
		if other == ck || h.isInit(other) || len(g.shares) != 1 || g.shares[0].UUID != shares[0].UUID {
			continue
		}
		if o, ok := h.mpsClientLocked(other, g.shares); ok {
			others = append(others, o)
		}
	}
	return checkMPSUser(h.cards.byUUID[shares[0].UUID], c, others)
}
