package extender

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// pendingPods counts the pods that wait for a node and ask
// aliyun.com/gpu-mem. It watches only pods without a node, with the field
// selector spec.nodeName="". The API server reports a pod that gets a node
// as deleted. Each pod is stripped to what the count needs, so it holds the
// pending pods alone, not the cluster's.
type pendingPods struct {
	// store holds a *pendingPod per unscheduled pod, keyed namespace/name.
	store toolscache.Store
}

// pendingPod is what pendingPods keeps of a pod.
type pendingPod struct {
	metav1.ObjectMeta
	// nodeName is checked again: a client that ignores field selectors (a
	// fake clientset) delivers bound pods too.
	nodeName string
	// asksGPU: a container or init container asks gpu-mem.
	asksGPU bool
	// finished: Succeeded or Failed. A pod can fail before it is scheduled.
	finished bool
}

// newPendingPods makes factory's pod informer the pending pods' own. It is
// filtered and stripped, so it serves nobody else. The factory's owner
// starts it.
func newPendingPods(factory informers.SharedInformerFactory) (*pendingPods, error) {
	inf := factory.InformerFor(&corev1.Pod{}, func(client kubernetes.Interface, resync time.Duration) toolscache.SharedIndexInformer {
		return coreinformers.NewFilteredPodInformer(client, metav1.NamespaceAll, resync,
			toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc},
			func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", "").String()
			})
	})
	// After InformerFor, which sets the factory's own transform (none).
	if err := inf.SetTransform(stripPending); err != nil {
		return nil, fmt.Errorf("stripping the pending pods: %w", err)
	}
	return &pendingPods{store: inf.GetStore()}, nil
}

// stripPending is the pending pods informer's transform.
func stripPending(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &pendingPod{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion},
		nodeName:   pod.Spec.NodeName,
		asksGPU:    asksGPUMem(pod),
		finished:   pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed,
	}, nil
}

// register adds the gauge gpushare_extender_pending_pods, read at scrape
// time.
func (p *pendingPods) register(reg prometheus.Registerer) error {
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "gpushare", Subsystem: "extender", Name: "pending_pods",
		Help: "Pods without a node that ask aliyun.com/gpu-mem (not Succeeded or Failed), from a watch of unscheduled pods.",
	}, func() float64 { return float64(p.Count()) })); err != nil {
		return fmt.Errorf("registering the pending-pods gauge: %w", err)
	}
	return nil
}

// Count returns the pods without a node, not finished, that ask gpu-mem.
func (p *pendingPods) Count() int {
	n := 0
	for _, obj := range p.store.List() {
		if pp, ok := obj.(*pendingPod); ok && pp.nodeName == "" && pp.asksGPU && !pp.finished {
			n++
		}
	}
	return n
}

// asksGPUMem reports whether a container or init container of pod asks
// aliyun.com/gpu-mem, validly or not.
func asksGPUMem(pod *corev1.Pod) bool {
	_, err := gpushare.PodDemand(pod)
	return !errors.Is(err, gpushare.ErrNoGPUMem)
}
