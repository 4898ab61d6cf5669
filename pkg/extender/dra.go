package extender

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/draview"
	"github.com/gpushare/gpushare/pkg/feed"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// ClaimSource reads the ResourceClaims the extender's informer holds
// (feed.Feeder with EnableDRA).
type ClaimSource interface {
	// Claim returns namespace/name; ok is false when it is not known (yet).
	Claim(namespace, name string) (*resourcev1.ResourceClaim, bool)
	// DRAUnit is the unit the DRA nodes' memory is counted in.
	DRAUnit() string
}

var _ ClaimSource = (*feed.Feeder)(nil)

// draDemand returns the demand of a claim pod, with info.DRA set. That is
// the memory its one claim of the driver's DeviceClass asks
// (draview.RequestBytes), on one card, in claims' unit. It returns an error
// when none of the pod's claims, or more than one, asks memory of one card
// of the driver. It also does when the pod's claims are not all known yet.
// kube-controller-manager makes a pod's claim from its template before
// kube-scheduler tries the pod, but the informer may lag.
func draDemand(pod *corev1.Pod, info *kubeinfo.PodInfo, claims ClaimSource) error {
	var found []string
	var bytes int64
	for _, rc := range pod.Spec.ResourceClaims {
		name := ""
		switch {
		case rc.ResourceClaimName != nil:
			name = *rc.ResourceClaimName
		case rc.ResourceClaimTemplateName != nil:
			for _, st := range pod.Status.ResourceClaimStatuses {
				if st.Name == rc.Name && st.ResourceClaimName != nil {
					name = *st.ResourceClaimName
				}
			}
		}
		if name == "" {
			return fmt.Errorf("pod's claim %q has no ResourceClaim yet", rc.Name)
		}
		cl, ok := claims.Claim(pod.Namespace, name)
		if !ok {
			return fmt.Errorf("ResourceClaim %s/%s (the pod's claim %q): %w", pod.Namespace, name, rc.Name, errClaimNotSeen)
		}
		if b, ok := draview.RequestBytes(&cl.Spec); ok {
			found, bytes = append(found, name), b
		}
	}
	switch len(found) {
	case 0:
		return fmt.Errorf("none of the pod's claims asks memory of one card of DeviceClass %s", draview.DeviceClassName)
	case 1:
	default:
		return fmt.Errorf("the pod's claims %v each ask memory of a card of DeviceClass %s; the extender rates nodes for one", found, draview.DeviceClassName)
	}
	info.Demand = gpushare.Demand{{Name: found[0], Units: draview.Units(bytes, claims.DRAUnit()), Cards: 1}}
	info.DRA = true
	return nil
}

// errClaimNotSeen: a claim of the pod is not in the extender's informer.
var errClaimNotSeen = errors.New("not in the extender's informer yet")

// claimWait bounds how long filter waits for a claim pod's claim to reach
// the extender's informer. kube-scheduler tries the pod once its own
// informer has the claim, and the extender's follows within milliseconds.
// A pod filtered before then was placed without the extender's choice:
// every node passed. kube-scheduler's cycle waits with the filter, so the
// wait stays short. claimPoll is how often it looks.
const (
	claimWait = 250 * time.Millisecond
	claimPoll = 5 * time.Millisecond
)

// awaitClaim calls draDemand until the pod's claims are all in the
// informer, claimWait has passed, or ctx ends. It returns the last error.
func awaitClaim(ctx context.Context, pod *corev1.Pod, info *kubeinfo.PodInfo, claims ClaimSource) error {
	var err error
	_ = wait.PollUntilContextTimeout(ctx, claimPoll, claimWait, true, func(context.Context) (bool, error) {
		err = draDemand(pod, info, claims)
		return !errors.Is(err, errClaimNotSeen), nil
	})
	return err
}

// filterDRA answers filter for a claim pod (gpushare.AsksDRAClaim). It
// passes the nodes that fragaware, or the pod's policy, rates best for the
// card kube-scheduler's first fit will give its claim there
// (cache.FilterBest with PodInfo.DRA). kube-scheduler's DynamicResources
// plugin has already kept only the nodes where the claim can be allocated,
// and allocates it itself. So the extender's answer only narrows the
// choice. Where it cannot rate, it passes every node, never failing the
// pod, and says why in the log. It cannot rate when node choice is off,
// the claim is not in the informer claimWait after the call, or the claim
// has another shape. Nor can it when no node fits in its view, which may
// lag behind the scheduler's.
func (h *Handlers) filterDRA(ctx context.Context, args *extenderv1.ExtenderArgs) (*extenderv1.ExtenderFilterResult, error) {
	logger := klog.FromContext(ctx)
	pod, names, err := podArgs(args, true)
	if err != nil {
		return nil, err
	}
	all := filterResult(args, names, nil)
	if h.cfg.Claims == nil {
		logger.V(2).Info("Passing every node for a pod that asks the extender's node choice of a DRA claim: off (--dra-node-choice)")
		return all, nil
	}
	if pod.Demand != nil {
		return nil, fmt.Errorf("pod %s/%s asks %s and %s; a pod gets its GPU memory from the device plugin or from a DRA claim, not both", args.Pod.Namespace, args.Pod.Name, gpushare.ResourceGPUMem, gpushare.ResourceDRAClaim)
	}
	if err := awaitClaim(ctx, args.Pod, pod, h.cfg.Claims); err != nil {
		logger.V(2).Info("Passing every node for a claim pod", "reason", err.Error())
		return all, nil
	}
	var fit []string
	var failed map[string]string
	err = h.searching(ctx, pod, func() (err error) {
		fit, failed, err = h.cfg.Placer.FilterBest(ctx, pod, names)
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(fit) == 0 {
		logger.V(2).Info("Passing every node for a claim pod: none fits in the extender's view of the DRA nodes", "nodes", len(names))
		return all, nil
	}
	logger.V(4).Info("Filtered a claim pod", "units", pod.Demand.Total(), "fit", len(fit), "failed", len(failed))
	return filterResult(args, fit, failed), nil
}
