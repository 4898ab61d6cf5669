package handoff

import (
	"context"
	"errors"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// PodAPI is the pod write the handoff makes. It reads through the informer
// and NodePodLister.
type PodAPI interface {
	// PatchPodAnnotations sets annotations of the pod namespace/name whose
	// UID is uid, or removes those whose value is nil. It fails, and
	// changes nothing, when that name now belongs to another pod.
	PatchPodAnnotations(ctx context.Context, namespace, name string, uid types.UID, set map[string]*string) error
}

// Annotator writes the pod annotations a handoff wants, off the Allocate
// path: ASSIGNED, and allocations repaired to the cards kubelet gave.
type Annotator struct {
	api   PodAPI
	queue workqueue.TypedRateLimitingInterface[types.UID]
}

// NewAnnotator returns an annotator that patches pods through api.
func NewAnnotator(api PodAPI) *Annotator {
	return &Annotator{api: api, queue: workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.DefaultTypedControllerRateLimiter[types.UID](),
		workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "gpushare-pod-annotations"})}
}

// Enqueue schedules pod uid for a check; it serves as a Config.Notify.
func (a *Annotator) Enqueue(uid types.UID) { a.queue.Add(uid) }

// Run writes what h wants of each queued pod until ctx ends.
func (a *Annotator) Run(ctx context.Context, h *Handoff) {
	go func() {
		<-ctx.Done()
		a.queue.ShutDown()
	}()
	for a.step(ctx, h) {
	}
}

func (a *Annotator) step(ctx context.Context, h *Handoff) bool {
	uid, quit := a.queue.Get()
	if quit {
		return false
	}
	defer a.queue.Done(uid)
	ns, name, set := h.Desired(uid)
	if set == nil {
		a.queue.Forget(uid)
		return true
	}
	logger := klog.FromContext(ctx)
	err := a.api.PatchPodAnnotations(ctx, ns, name, uid, set)
	switch {
	case err == nil:
		a.queue.Forget(uid)
		h.Patched(uid, set)
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

// repaired returns e's allocation with every granted container on the cards
// it holds. The caller holds h.mu.
func (h *Handoff) repaired(e *podEntry) *gpushare.Allocation {
	a := *e.alloc
	a.Containers = slices.Clone(e.alloc.Containers)
	for i, c := range a.Containers {
		if g := h.grants[containerKey{e.uid, c.Name}]; g != nil && !sameShares(g.shares, c.Devices) {
			a.Containers[i].Devices = slices.Clone(g.shares)
		}
	}
	return &a
}

// Desired returns the annotation changes pod uid needs. The allocation is
// repaired to the cards its containers hold, with the Aliyun keys derived
// from it. ASSIGNED is "true" once every container is allocated, and
// "false" again if kubelet showed a match to be wrong. set is nil when
// nothing differs.
func (h *Handoff) Desired(uid types.UID) (namespace, name string, set map[string]*string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.pods[uid]
	if e == nil || e.alloc == nil || h.legacy[uid] != nil {
		return "", "", nil
	}
	want := map[string]string{gpushare.AnnotationAssigned: "false"}
	if h.next(e) < 0 {
		want[gpushare.AnnotationAssigned] = "true"
	}
	if a := h.repaired(e); !sameAllocation(a, e.alloc) {
		if enc, err := a.Encode(); err == nil {
			want[gpushare.AnnotationAllocation] = enc
			if d, ok := a.FirstAppDevice(); ok {
				want[gpushare.AnnotationIndex] = strconv.Itoa(d.Index)
				want[gpushare.AnnotationDevMem] = strconv.FormatInt(h.cards.byUUID[d.UUID].Units, 10)
			}
			want[gpushare.AnnotationPodMem] = strconv.FormatInt(a.Total(), 10)
		}
	}
	for k, v := range want {
		if old, ok := e.annotations[k]; ok && old == v {
			continue
		}
		if k == gpushare.AnnotationAssigned && v == "false" && e.annotations[k] == "" {
			continue // never set: leave it to the extender
		}
		if set == nil {
			set = map[string]*string{}
		}
		set[k] = &v
	}
	return e.namespace, e.name, set
}

// Patched records annotations just written, so that Desired does not
// write them again before the informer delivers the update.
func (h *Handoff) Patched(uid types.UID, set map[string]*string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := h.pods[uid]
	if e == nil {
		return
	}
	for k, v := range set {
		if v == nil {
			delete(e.annotations, k)
		} else {
			e.annotations[k] = *v
		}
	}
}

func sameAllocation(a, b *gpushare.Allocation) bool {
	if len(a.Containers) != len(b.Containers) {
		return false
	}
	for i := range a.Containers {
		if !sameShares(a.Containers[i].Devices, b.Containers[i].Devices) {
			return false
		}
	}
	return true
}
