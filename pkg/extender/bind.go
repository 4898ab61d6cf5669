package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// PodAPI is the part of the Kubernetes API the binder uses.
type PodAPI interface {
	// GetPod reads a pod from the API server (not a cache).
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	// PatchAnnotations sets (non-nil) or removes (nil) annotations, failing
	// with a Conflict unless the pod is at resourceVersion ("" for any).
	PatchAnnotations(ctx context.Context, namespace, name, resourceVersion string, set map[string]*string) error
	// Bind creates the pod's Binding to node.
	Bind(ctx context.Context, namespace, name string, uid types.UID, node string) error
}

// PodCache reads pods from an informer cache; it may be stale or miss new pods.
type PodCache interface {
	Pod(namespace, name string) (*cache.PodInfo, bool)
}

// maxConflictRetries bounds the re-read-and-patch attempts of one bind.
const maxConflictRetries = 5

// Binder chooses cards, records them on the pod and binds it.
type Binder struct {
	cache *cache.Cache
	api   PodAPI
	pods  PodCache
	clock clock.PassiveClock
}

// NewBinder returns a binder; clk may be nil for the real clock.
func NewBinder(c *cache.Cache, api PodAPI, pods PodCache, clk clock.PassiveClock) *Binder {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Binder{cache: c, api: api, pods: pods, clock: clk}
}

// Bind places the pod on node's cards, writes the annotations and creates
// the Binding. It is idempotent for a pod already bound to node.
func (b *Binder) Bind(ctx context.Context, namespace, name string, uid types.UID, node string) error {
	logger := klog.FromContext(ctx)
	if namespace == "" || name == "" || node == "" {
		return fmt.Errorf("bind request needs PodNamespace, PodName and Node; got %q, %q, %q", namespace, name, node)
	}
	pod, err := b.pod(ctx, namespace, name, uid)
	if err != nil {
		return err
	}
	if pod.NodeName != "" {
		if pod.NodeName == node {
			logger.V(2).Info("Pod already bound to this node; nothing to do", "pod", klog.KObj(pod), "node", node)
			return nil
		}
		return fmt.Errorf("pod %s/%s is already bound to node %s, not %s: %w", namespace, name, pod.NodeName, node, cache.ErrBoundElsewhere)
	}
	if pod.Demand == nil {
		// Say why: no gpu-mem at all, or an invalid request.
		full, err := b.api.GetPod(ctx, namespace, name)
		if err == nil {
			_, err = gpushare.PodDemand(full)
		}
		return fmt.Errorf("pod %s/%s: %w", namespace, name, err)
	}
	alloc, err := b.cache.Assume(pod, pod.Demand, node, pod.Policy)
	if err != nil {
		return fmt.Errorf("placing pod %s/%s on node %s: %w", namespace, name, node, err)
	}
	logger.V(4).Info("Chose cards", "pod", klog.KObj(pod), "node", node, "allocation", alloc)

	written, err := b.annotate(ctx, pod, alloc)
	if err == nil {
		err = b.bind(ctx, pod, node)
	}
	if err != nil {
		b.cache.Forget(pod.UID)
		if written {
			b.unannotate(ctx, pod)
		}
		return err
	}
	b.cache.FinishBinding(pod.UID)
	logger.V(2).Info("Bound pod", "pod", klog.KObj(pod), "node", node, "units", alloc.Total(), "unit", alloc.Unit)
	return nil
}

// pod returns the pod from the informer cache, or from the API when the
// cache misses it or holds an older pod of the same name.
func (b *Binder) pod(ctx context.Context, namespace, name string, uid types.UID) (*cache.PodInfo, error) {
	if p, ok := b.pods.Pod(namespace, name); ok && (uid == "" || p.UID == uid) {
		return p, nil
	}
	p, err := b.api.GetPod(ctx, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	if uid != "" && p.UID != uid {
		return nil, fmt.Errorf("pod %s/%s has UID %s, the scheduler asked to bind %s (deleted and re-created?)", namespace, name, p.UID, uid)
	}
	return cache.NewPodInfo(p), nil
}

// annotations returns what bind writes on the pod.
func (b *Binder) annotations(alloc *gpushare.Allocation) (map[string]*string, error) {
	enc, err := alloc.Encode()
	if err != nil {
		return nil, err
	}
	// The Aliyun keys describe the first app container's first card (the
	// first container at all for an init-only pod).
	first := alloc.Containers[0]
	for _, c := range alloc.Containers {
		if !c.Init {
			first = c
			break
		}
	}
	idx := first.Devices[0].Index
	devTotal, _ := b.cache.CardTotal(alloc.Node, idx)
	str := func(s string) *string { return &s }
	return map[string]*string{
		gpushare.AnnotationAllocation: str(enc),
		gpushare.AnnotationIndex:      str(strconv.Itoa(idx)),
		gpushare.AnnotationPodMem:     str(strconv.FormatInt(alloc.Total(), 10)),
		gpushare.AnnotationDevMem:     str(strconv.FormatInt(devTotal, 10)),
		gpushare.AnnotationAssigned:   str("false"),
		gpushare.AnnotationAssumeTime: str(strconv.FormatInt(b.clock.Now().UnixNano(), 10)),
	}, nil
}

// annotate writes the allocation on the pod, at the resourceVersion it was
// read at; on a conflict it re-reads the pod and tries again. written
// reports whether the annotations may be on the pod.
func (b *Binder) annotate(ctx context.Context, pod *cache.PodInfo, alloc *gpushare.Allocation) (written bool, err error) {
	set, err := b.annotations(alloc)
	if err != nil {
		return false, err
	}
	rv := pod.ResourceVersion
	for attempt := 0; ; attempt++ {
		err = b.api.PatchAnnotations(ctx, pod.Namespace, pod.Name, rv, set)
		if err == nil {
			return true, nil
		}
		if !apierrors.IsConflict(err) || attempt == maxConflictRetries {
			return false, fmt.Errorf("writing allocation annotations on pod %s/%s: %w", pod.Namespace, pod.Name, err)
		}
		fresh, gerr := b.api.GetPod(ctx, pod.Namespace, pod.Name)
		if gerr != nil {
			return false, fmt.Errorf("re-reading pod %s/%s after a conflict: %w", pod.Namespace, pod.Name, gerr)
		}
		if fresh.UID != pod.UID {
			return false, fmt.Errorf("pod %s/%s was re-created while binding", pod.Namespace, pod.Name)
		}
		if fresh.Spec.NodeName != "" && fresh.Spec.NodeName != alloc.Node {
			return false, fmt.Errorf("pod %s/%s was bound to node %s meanwhile: %w", pod.Namespace, pod.Name, fresh.Spec.NodeName, cache.ErrBoundElsewhere)
		}
		rv = fresh.ResourceVersion
	}
}

// unannotate removes the allocation annotations after a failed bind, so a
// restarted extender does not hold the cards for an unbound pod. Best
// effort: the cache has already released them.
func (b *Binder) unannotate(ctx context.Context, pod *cache.PodInfo) {
	clear := map[string]*string{}
	for _, k := range []string{gpushare.AnnotationAllocation, gpushare.AnnotationIndex, gpushare.AnnotationPodMem,
		gpushare.AnnotationDevMem, gpushare.AnnotationAssigned, gpushare.AnnotationAssumeTime} {
		clear[k] = nil
	}
	if err := b.api.PatchAnnotations(ctx, pod.Namespace, pod.Name, "", clear); err != nil && !apierrors.IsNotFound(err) {
		klog.FromContext(ctx).Error(err, "Could not remove the allocation of a failed bind; it expires on its own", "pod", klog.KObj(pod))
	}
}

// bind creates the Binding. A Binding refused because the pod is already
// on node (a retry after a timeout that hid success) counts as success.
func (b *Binder) bind(ctx context.Context, pod *cache.PodInfo, node string) error {
	err := b.api.Bind(ctx, pod.Namespace, pod.Name, pod.UID, node)
	if err == nil {
		return nil
	}
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		if fresh, gerr := b.api.GetPod(ctx, pod.Namespace, pod.Name); gerr == nil && fresh.UID == pod.UID && fresh.Spec.NodeName == node {
			return nil
		}
	}
	return fmt.Errorf("binding pod %s/%s to node %s: %w", pod.Namespace, pod.Name, node, err)
}

// ClientPodAPI implements PodAPI with a clientset.
type ClientPodAPI struct {
	Client kubernetes.Interface
}

var _ PodAPI = ClientPodAPI{}

func (a ClientPodAPI) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return a.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (a ClientPodAPI) PatchAnnotations(ctx context.Context, namespace, name, resourceVersion string, set map[string]*string) error {
	meta := map[string]any{"annotations": set}
	if resourceVersion != "" {
		meta["resourceVersion"] = resourceVersion
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = a.Client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

func (a ClientPodAPI) Bind(ctx context.Context, namespace, name string, uid types.UID, node string) error {
	return a.Client.CoreV1().Pods(namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
}
