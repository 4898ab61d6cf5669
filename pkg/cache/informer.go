package cache

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// expiryPeriod is how often assumed allocations are checked for expiry.
const expiryPeriod = 5 * time.Second

// Feeder keeps a Cache in step with the API through shared informers.
type Feeder struct {
	cache     *Cache
	factory   informers.SharedInformerFactory
	podLister corelisters.PodLister
	// synced reports whether both informers' initial lists have been
	// delivered to the cache.
	synced []toolscache.InformerSynced
}

// NewFeeder registers node and pod informers that feed c. Stored objects
// are stripped to the fields the extender reads, so 40,000 pods fit in a
// few tens of MiB.
func NewFeeder(ctx context.Context, c *Cache, client kubernetes.Interface) (*Feeder, error) {
	logger := klog.FromContext(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(strip))
	f := &Feeder{cache: c, factory: factory}

	podInf := factory.Core().V1().Pods()
	f.podLister = podInf.Lister()
	podReg, err := podInf.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.upsertPod(obj) },
		UpdateFunc: func(_, obj any) { f.upsertPod(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				c.DeletePod(pod.UID)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("registering pod handler: %w", err)
	}
	nodeReg, err := factory.Core().V1().Nodes().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { f.setNode(logger, nil, obj) },
		UpdateFunc: func(old, obj any) {
			f.setNode(logger, old, obj)
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if node, ok := obj.(*corev1.Node); ok {
				c.DeleteNode(node.Name)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("registering node handler: %w", err)
	}
	f.synced = []toolscache.InformerSynced{podReg.HasSynced, nodeReg.HasSynced}
	return f, nil
}

func (f *Feeder) upsertPod(obj any) {
	if pod, ok := obj.(*corev1.Pod); ok {
		f.cache.UpsertPod(pod)
	}
}

func (f *Feeder) setNode(logger klog.Logger, old, obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	if err := f.cache.SetNode(node); err != nil {
		// Log once per change of the annotation, not on every heartbeat.
		if o, ok := old.(*corev1.Node); !ok || o.Annotations[gpushare.AnnotationInventory] != node.Annotations[gpushare.AnnotationInventory] {
			logger.Error(err, "Falling back to node capacity", "node", klog.KObj(node))
		}
	}
}

// Start starts the informers and the expiry loop; both stop with ctx.
func (f *Feeder) Start(ctx context.Context) {
	f.factory.Start(ctx.Done())
	logger := klog.FromContext(ctx)
	go wait.UntilWithContext(ctx, func(context.Context) {
		for _, e := range f.cache.Expire() {
			logger.Info("Released an assumed allocation whose bind never completed", "pod", klog.KRef(e.Namespace, e.Name), "node", e.Node)
		}
	}, expiryPeriod)
}

// WaitForSync blocks until the initial lists are in the cache or ctx ends.
func (f *Feeder) WaitForSync(ctx context.Context) bool {
	return toolscache.WaitForCacheSync(ctx.Done(), f.synced...)
}

// Synced reports whether the initial lists are in the cache.
func (f *Feeder) Synced() bool {
	for _, s := range f.synced {
		if !s() {
			return false
		}
	}
	return true
}

// PodLister reads the (stripped) pods the informer holds.
func (f *Feeder) PodLister() corelisters.PodLister { return f.podLister }

// strip is the informers' transform: it keeps only what the extender reads.
func strip(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return stripPod(o), nil
	case *corev1.Node:
		return stripNode(o), nil
	}
	return obj, nil
}

func stripMeta(m *metav1.ObjectMeta, keep func(key string) bool) metav1.ObjectMeta {
	out := metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		CreationTimestamp: m.CreationTimestamp, DeletionTimestamp: m.DeletionTimestamp,
	}
	for k, v := range m.Annotations {
		if keep(k) {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out
}

func isGPUResource(r corev1.ResourceName) bool {
	return r == gpushare.ResourceGPUMem || r == gpushare.ResourceGPUCount
}

func stripResources(rl corev1.ResourceList) corev1.ResourceList {
	var out corev1.ResourceList
	for r, q := range rl {
		if isGPUResource(r) {
			if out == nil {
				out = corev1.ResourceList{}
			}
			out[r] = q
		}
	}
	return out
}

func stripContainers(cs []corev1.Container) []corev1.Container {
	var out []corev1.Container
	for _, c := range cs {
		lim, req := stripResources(c.Resources.Limits), stripResources(c.Resources.Requests)
		if lim == nil && req == nil {
			continue
		}
		out = append(out, corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy, Resources: corev1.ResourceRequirements{Limits: lim, Requests: req}})
	}
	return out
}

func stripPod(p *corev1.Pod) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: stripMeta(&p.ObjectMeta, func(k string) bool {
			return strings.HasPrefix(k, "ALIYUN_COM_GPU_MEM_") || strings.HasPrefix(k, "gpushare.io/")
		}),
		Spec: corev1.PodSpec{
			NodeName:       p.Spec.NodeName,
			SchedulerName:  p.Spec.SchedulerName,
			InitContainers: stripContainers(p.Spec.InitContainers),
			Containers:     stripContainers(p.Spec.Containers),
		},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
}

func stripNode(n *corev1.Node) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: stripMeta(&n.ObjectMeta, func(k string) bool { return k == gpushare.AnnotationInventory }),
		Status: corev1.NodeStatus{
			Capacity:    stripResources(n.Status.Capacity),
			Allocatable: stripResources(n.Status.Allocatable),
		},
	}
}
