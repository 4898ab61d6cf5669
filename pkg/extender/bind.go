package extender

import (
	"context"
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
	// Bind creates the pod's Binding to node, which sets spec.nodeName and
	// merges annotations into the pod in one update, provided the pod
	// still has UID uid and no node.
	Bind(ctx context.Context, namespace, name string, uid types.UID, node string, annotations map[string]string) error
}

// PodCache reads pods from an informer cache; it may be stale or miss new pods.
type PodCache interface {
	Pod(namespace, name string) (*cache.PodInfo, bool)
}

// maxConflictRetries bounds the re-read-and-bind attempts of one bind.
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
// the Binding. It is idempotent for a pod already bound to node. It logs
// with ctx's logger, which the caller has given the pod and node keys (the
// bind handler does).
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
			logger.V(2).Info("Pod already bound to this node; nothing to do")
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
	alloc, err := b.cache.Assume(pod, node)
	if err != nil {
		return fmt.Errorf("placing pod %s/%s on node %s: %w", namespace, name, node, err)
	}
	logger.V(4).Info("Chose cards", "allocation", alloc)

	if err := b.bind(ctx, pod, node, alloc); err != nil {
		b.cache.Forget(pod.UID)
		return err
	}
	b.cache.FinishBinding(pod.UID)
	logger.V(2).Info("Bound pod", "units", alloc.Total(), "unit", alloc.Unit)
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
func (b *Binder) annotations(alloc *gpushare.Allocation) (map[string]string, error) {
	enc, err := alloc.Encode()
	if err != nil {
		return nil, err
	}
	// The Aliyun keys describe the first app container's first card.
	first, ok := alloc.FirstAppDevice()
	if !ok {
		return nil, fmt.Errorf("allocation on node %s names no card", alloc.Node)
	}
	idx := first.Index
	devTotal, _ := b.cache.CardTotal(alloc.Node, idx)
	return map[string]string{
		gpushare.AnnotationAllocation: enc,
		gpushare.AnnotationIndex:      strconv.Itoa(idx),
		gpushare.AnnotationPodMem:     strconv.FormatInt(alloc.Total(), 10),
		gpushare.AnnotationDevMem:     strconv.FormatInt(devTotal, 10),
		gpushare.AnnotationAssigned:   "false",
		gpushare.AnnotationAssumeTime: strconv.FormatInt(b.clock.Now().UnixNano(), 10),
	}, nil
}

// bind creates the Binding that carries the allocation annotations, so
// the API server sets the node and the annotations in one update: no
// reader ever sees a pod annotated but unbound, and a bind costs one write.
// On a conflict it re-reads the pod: already on node (a retry after a
// timeout that hid success) is success; on another node, or re-created, is
// an error; otherwise it tries again.
func (b *Binder) bind(ctx context.Context, pod *cache.PodInfo, node string, alloc *gpushare.Allocation) error {
	ann, err := b.annotations(alloc)
	if err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		err = b.api.Bind(ctx, pod.Namespace, pod.Name, pod.UID, node, ann)
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("binding pod %s/%s to node %s: %w", pod.Namespace, pod.Name, node, err)
		}
		fresh, gerr := b.api.GetPod(ctx, pod.Namespace, pod.Name)
		switch {
		case gerr != nil:
			return fmt.Errorf("re-reading pod %s/%s after a binding conflict: %w", pod.Namespace, pod.Name, gerr)
		case fresh.UID != pod.UID:
			return fmt.Errorf("pod %s/%s was re-created while binding", pod.Namespace, pod.Name)
		case fresh.Spec.NodeName == node:
			return nil
		case fresh.Spec.NodeName != "":
			return fmt.Errorf("pod %s/%s was bound to node %s meanwhile: %w", pod.Namespace, pod.Name, fresh.Spec.NodeName, cache.ErrBoundElsewhere)
		case attempt == maxConflictRetries:
			return fmt.Errorf("binding pod %s/%s to node %s: %w", pod.Namespace, pod.Name, node, err)
		}
	}
}

// ClientPodAPI implements PodAPI with a clientset.
type ClientPodAPI struct {
	Client kubernetes.Interface
}

var _ PodAPI = ClientPodAPI{}

func (a ClientPodAPI) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	return a.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
}

func (a ClientPodAPI) Bind(ctx context.Context, namespace, name string, uid types.UID, node string, annotations map[string]string) error {
	return a.Client.CoreV1().Pods(namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: uid, Annotations: annotations},
		Target:     corev1.ObjectReference{Kind: "Node", Name: node},
	}, metav1.CreateOptions{})
}
