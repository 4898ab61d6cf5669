package deviceplugin

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// annotator writes the pod annotations the handoff wants (ASSIGNED, and
// allocations repaired to the cards kubelet gave), off the Allocate path.
type annotator struct {
	handoff *Handoff
	api     PodAPI
	queue   workqueue.TypedRateLimitingInterface[types.UID]
}

func newAnnotator(api PodAPI) *annotator {
	return &annotator{api: api, queue: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[types.UID](),
		workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "gpushare-pod-annotations"})}
}

// enqueue schedules pod uid for a check.
func (a *annotator) enqueue(uid types.UID) { a.queue.Add(uid) }

// run works the queue until ctx ends.
func (a *annotator) run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		a.queue.ShutDown()
	}()
	for a.step(ctx) {
	}
}

func (a *annotator) step(ctx context.Context) bool {
	uid, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(uid)
	ns, name, set := a.handoff.Desired(uid)
	if set == nil {
		a.queue.Forget(uid)
		return true
	}
	logger := klog.FromContext(ctx)
	err := a.api.PatchPodAnnotations(ctx, ns, name, uid, set)
	switch {
	case err == nil:
		a.queue.Forget(uid)
		a.handoff.Patched(uid, set)
		keys := make([]string, 0, len(set))
		for k := range set {
			keys = append(keys, k)
		}
		logger.V(4).Info("Patched pod annotations", "pod", klog.KRef(ns, name), "keys", keys)
	case apierrors.IsNotFound(err):
		a.queue.Forget(uid)
	case uidChanged(err):
		// The pod was deleted and its name taken by another pod; the
		// informer's update (a delete and an add) follows.
		a.queue.Forget(uid)
		logger.V(2).Info("Pod re-created under the same name; its old annotations are not written", "pod", klog.KRef(ns, name), "uid", uid)
	default:
		logger.Error(err, "Patching pod annotations; retrying", "pod", klog.KRef(ns, name))
		a.queue.AddRateLimited(uid)
	}
	return true
}

// uidChanged reports whether kube-apiserver refused a patch because its
// metadata.uid is not the stored pod's: the name belongs to another pod.
func uidChanged(err error) bool {
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil {
		return false
	}
	for _, c := range status.Status().Details.Causes {
		if c.Field == "metadata.uid" {
			return true
		}
	}
	return false
}
