package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// NodeTaintAPI is the part of the API the idle taint needs.
type NodeTaintAPI interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// SetNodeTaints replaces the node's taints with taints, provided the
	// node is still at resourceVersion (else an error: read it again).
	SetNodeTaints(ctx context.Context, name, resourceVersion string, taints []corev1.Taint) error
}

// IdleTaint keeps the node's gpushare.TaintIdleGPUs taint, PreferNoSchedule,
// where gpushare.WantsIdleTaint says: on a node of at least MinCards cards
// while no pod on it asks GPU memory. The pods are those bound to the node
// and not finished, deleting or not: their cards are not free before they
// are gone. Other taints are left as they are. MinCards 0 keeps none, and
// removes one left by an earlier run.
type IdleTaint struct {
	API      NodeTaintAPI
	Node     string
	Cards    int
	MinCards int
	// Pods returns the pods bound to the node (the plugin's informer).
	Pods func() []*corev1.Pod
}

// idleTaintTries bounds the read-and-write rounds of one Sync: each write
// is conditional on the node's resourceVersion, which kubelet's status
// updates move on.
const idleTaintTries = 5

// Idle reports whether no pod of pods asks GPU memory and has not finished.
func Idle(pods []*corev1.Pod) bool {
	for _, p := range pods {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if _, err := gpushare.PodDemand(p); err == nil {
			return false
		}
	}
	return true
}

// Sync adds or removes the taint so that the node carries it exactly when
// it should now, and reports whether it changed the node.
func (t *IdleTaint) Sync(ctx context.Context) (changed bool, err error) {
	want := gpushare.WantsIdleTaint(t.Cards, t.MinCards, Idle(t.Pods()))
	return t.set(ctx, want)
}

// Remove takes the taint off the node (the plugin is stopping: nobody
// would keep it true).
func (t *IdleTaint) Remove(ctx context.Context) error {
	_, err := t.set(ctx, false)
	return err
}

func (t *IdleTaint) set(ctx context.Context, want bool) (changed bool, err error) {
	var errs []error
	for range idleTaintTries {
		node, err := t.API.GetNode(ctx, t.Node)
		if err != nil {
			return false, fmt.Errorf("reading node %s: %w", t.Node, err)
		}
		has := slices.ContainsFunc(node.Spec.Taints, isIdleTaint)
		if has == want {
			return false, nil
		}
		taints := slices.DeleteFunc(slices.Clone(node.Spec.Taints), isIdleTaint)
		if want {
			taints = append(taints, corev1.Taint{Key: gpushare.TaintIdleGPUs, Effect: corev1.TaintEffectPreferNoSchedule})
		}
		err = t.API.SetNodeTaints(ctx, t.Node, node.ResourceVersion, taints)
		if err == nil {
			return true, nil
		}
		if ctx.Err() != nil {
			return false, fmt.Errorf("setting the taint %s of node %s to %v: %w", gpushare.TaintIdleGPUs, t.Node, want, err)
		}
		errs = append(errs, err)
	}
	return false, fmt.Errorf("setting the taint %s of node %s to %v, %d tries: %w", gpushare.TaintIdleGPUs, t.Node, want, idleTaintTries, errors.Join(errs...))
}

func isIdleTaint(t corev1.Taint) bool { return t.Key == gpushare.TaintIdleGPUs }

// idleTaintPeriod is how often the idle taint is checked besides pod
// events.
const idleTaintPeriod = time.Minute

// Run syncs t at start, on request (now) and every idleTaintPeriod,
// retrying failures with backoff, and removes the taint when ctx ends.
func (t *IdleTaint) Run(ctx context.Context, now <-chan struct{}) {
	logger := klog.FromContext(ctx)
	backoff := time.Second
	for {
		wait := idleTaintPeriod
		if changed, err := t.Sync(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Keeping the idle-GPU taint; retrying", "in", backoff)
			wait, backoff = backoff, min(2*backoff, idleTaintPeriod)
		} else {
			backoff = time.Second
			if changed {
				logger.V(2).Info("Idle-GPU taint changed", "taint", gpushare.TaintIdleGPUs, "idle", Idle(t.Pods()))
			}
		}
		select {
		case <-ctx.Done():
			// A stopped plugin keeps nothing true: take the taint off.
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := t.Remove(stop); err != nil {
				logger.Error(err, "Removing the idle-GPU taint on the way out")
			}
			cancel()
			return
		case <-now:
		case <-time.After(wait):
		}
	}
}
