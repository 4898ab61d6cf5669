package handoff

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
)

// catchUp brings the handoff's pods up to the API server's, for a call
// that found no container waiting. kubelet watches its pods itself and
// often admits one before this plugin's informer has delivered it. The pod
// may also have taken the name of a pod whose deletion the informer has not
// delivered yet, or PodResources may not list it.
//
// catchUp reads the node's pods once, a consistent list within apiTimeout.
// It adds those the handoff does not know by UID. It forgets those it knew
// before the read that the API server no longer has. The informer will
// deliver the same, and a later delete of a forgotten pod, or an add
// already applied, changes nothing. A pod known by UID is left as it is:
// the informer may have delivered a newer version than the read. The caller
// matches again whatever this returns, since the informer may have
// delivered the pod meanwhile. h.mu is not held.
func (h *Handoff) catchUp(ctx context.Context) error {
	if h.api == nil {
		return nil
	}
	h.mu.Lock()
	before := make(map[types.UID]bool, len(h.pods))
	for uid := range h.pods {
		before[uid] = true
	}
	h.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	pods, err := h.api.ListNodePods(rctx, h.node)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Could not list the node's pods to catch up with the API server", "err", err)
		return fmt.Errorf("listing the pods of node %s from the API server: %w", h.node, err)
	}
	current := make(map[types.UID]bool, len(pods))
	added := 0
	for i := range pods {
		current[pods[i].UID] = true
		if h.upsert(&pods[i], true) {
			added++
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	gone := 0
	for uid := range before {
		if _, ok := h.pods[uid]; ok && !current[uid] {
			h.deletePod(uid)
			gone++
		}
	}
	klog.FromContext(ctx).V(2).Info("No container waited for kubelet's call; read the node's pods from the API server",
		"pods", len(pods), "added", added, "forgotten", gone)
	return nil
}

// apiTimeout bounds catchUp's API server read, which kubelet waits for in
// GetPreferredAllocation or Allocate. kubelet calls both without a deadline.
// An API server that does not answer would hold the pod's admission, and
// kubelet's admission of every later pod, forever.
const apiTimeout = 3 * time.Second
