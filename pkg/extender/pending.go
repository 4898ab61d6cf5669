package extender

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// pendingPods counts the pods that wait for a node and ask
// aliyun.com/gpu-mem. It watches only pods without a node (the field
// selector spec.nodeName=""; the API server reports a pod that gets one as
// deleted), each stripped to what the count needs, so it holds the
// pending pods alone, not the cluster's.
type pendingPods struct {
	factory informers.SharedInformerFactory
	// store holds a *pendingPod per unscheduled pod, keyed namespace/name.
	store toolscache.Store
}

// pendingPod is what pendingPods keeps of a pod.
type pendingPod struct {
	metav1.ObjectMeta
	// nodeName is checked again: a client that ignores field selectors
	// (a fake clientset) delivers bound pods too.
	nodeName string
	// asksGPU: a container or init container asks gpu-mem.
	asksGPU bool
	// finished: Succeeded or Failed (a pod can fail before it is scheduled).
	finished bool
}

func newPendingPods(client kubernetes.Interface) *pendingPods {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", "").String()
		}),
		informers.WithTransform(func(obj any) (any, error) {
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
		}))
	return &pendingPods{factory: factory, store: factory.Core().V1().Pods().Informer().GetStore()}
}

// Start starts the watch; it stops with ctx.
func (p *pendingPods) Start(ctx context.Context) { p.factory.Start(ctx.Done()) }

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
