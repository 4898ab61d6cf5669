package feed

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// expiryPeriod is how often assumed allocations are checked for expiry.
const expiryPeriod = 5 * time.Second

// Feeder keeps a Cache in step with the API through shared informers.
type Feeder struct {
	cache   *cache.Cache
	client  kubernetes.Interface
	factory informers.SharedInformerFactory
	// pods holds a *PodInfo per pod, keyed namespace/name. nodes holds a
	// *NodeInfo per node, keyed by name, and nodeCount is their number.
	pods      toolscache.Indexer
	nodes     toolscache.Store
	nodeCount atomic.Int64
	// synced reports whether the informers' initial lists have been
	// delivered to the cache.
	synced []toolscache.InformerSynced
	// With EnableDRA: slices holds the ResourceSlices, indexed by node. claims
	// holds the ResourceClaims, keyed namespace/name. draUnit is the unit their
	// memory is counted in. Without EnableDRA they are nil and "".
	slices, claims toolscache.Indexer
	draUnit        string
	logger         klog.Logger
}

// New registers node and pod informers that feed c. They store a *PodInfo
// per pod and a *NodeInfo per node, not the objects, which keeps the
// extender's memory small (docs/benchmarks.md#memory).
func New(ctx context.Context, c *cache.Cache, client kubernetes.Interface) (*Feeder, error) {
	logger := klog.FromContext(ctx)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(strip))
	f := &Feeder{cache: c, client: client, factory: factory, logger: logger}

	podInf := factory.InformerFor(&corev1.Pod{}, func(client kubernetes.Interface, resync time.Duration) toolscache.SharedIndexInformer {
		return coreinformers.NewPodInformer(client, metav1.NamespaceAll, resync, podIndexers())
	})
	f.pods = podInf.GetIndexer()
	podReg, err := podInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { f.upsertPod(obj) },
		UpdateFunc: func(old, obj any) {
			// A relist after a watch gap delivers a pod deleted and
			// re-created under the same name as one update, from the old UID
			// to the new, with no delete. The old pod's cards, CPU and
			// memory must go with it.
			if o, ok := old.(*kubeinfo.PodInfo); ok {
				if n, ok := obj.(*kubeinfo.PodInfo); ok && o.UID != n.UID {
					c.DeletePod(o.UID)
				}
			}
			f.upsertPod(obj)
		},
		DeleteFunc: func(obj any) {
			if pod, ok := deleted(obj).(*kubeinfo.PodInfo); ok {
				c.DeletePod(pod.UID)
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("registering pod handler: %w", err)
	}
	nodeInf := factory.Core().V1().Nodes().Informer()
	f.nodes = nodeInf.GetStore()
	nodeReg, err := nodeInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			f.nodeCount.Add(1)
			f.setNode(logger, nil, obj)
		},
		UpdateFunc: func(old, obj any) {
			f.setNode(logger, old, obj)
		},
		DeleteFunc: func(obj any) {
			f.nodeCount.Add(-1)
			if node, ok := deleted(obj).(*kubeinfo.NodeInfo); ok {
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

// deleted is the object of an informer's delete event: obj itself, or
// the last state a tombstone (DeletedFinalStateUnknown) holds.
func deleted(obj any) any {
	if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return t.Obj
	}
	return obj
}

// podIndexers are the pod informer store's indexes. It has none: the
// feeder looks pods up by key only. The namespace index an informer
// factory adds by default would cost memory for nothing (measured:
// docs/benchmarks.md#what-the-informers-objects-cost).
func podIndexers() toolscache.Indexers {
	return toolscache.Indexers{}
}

func (f *Feeder) upsertPod(obj any) {
	if pod, ok := obj.(*kubeinfo.PodInfo); ok {
		f.cache.UpsertPodInfo(pod)
	}
}

// setNode passes a node add or update on to the cache; old is nil for an
// add. It drops an update that leaves what the cache reads unchanged
// (NodeInfo.SameReads), such as a heartbeat or a label or condition
// change. SetNode would rebuild the node's cards and re-charge its pods
// under the cache's lock for nothing.
func (f *Feeder) setNode(logger klog.Logger, old, obj any) {
	node, ok := obj.(*kubeinfo.NodeInfo)
	if !ok {
		return
	}
	o, _ := old.(*kubeinfo.NodeInfo)
	if o != nil && o.SameReads(node) {
		return
	}
	if err := f.cache.SetNodeInfo(node); err != nil {
		// Log once per change of an annotation, not on every capacity
		// change. The error says what the cache does instead.
		if o == nil || !o.SameAnnotations(node) {
			logger.Error(err, "Ignoring an invalid node annotation", "node", klog.KObj(node))
		}
	}
}

// Start starts the informers and the expiry loop; both stop with ctx.
func (f *Feeder) Start(ctx context.Context) {
	f.factory.Start(ctx.Done())
	logger := klog.FromContext(ctx)
	go wait.UntilWithContext(ctx, func(context.Context) {
		for _, e := range f.cache.Expire() {
			if e.Reserved {
				logger.Info("Released the room a preemption reserved for a pod that was not bound in time", "pod", klog.KRef(e.Namespace, e.Name), "node", e.Node)
				continue
			}
			if e.Bound {
				logger.Info("Released the allocation of a pod bound by the extender that the informer never showed (deleted before its watch event?)", "pod", klog.KRef(e.Namespace, e.Name), "node", e.Node)
				continue
			}
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

// Pod returns the informer's PodInfo for namespace/name; ok is false when
// the informer does not hold it (yet).
func (f *Feeder) Pod(namespace, name string) (info *kubeinfo.PodInfo, ok bool) {
	obj, exists, err := f.pods.GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil, false
	}
	info, ok = obj.(*kubeinfo.PodInfo)
	return info, ok
}

// Node returns the informer's NodeInfo for node name; ok is false when the
// informer does not hold it (yet).
func (f *Feeder) Node(name string) (info *kubeinfo.NodeInfo, ok bool) {
	obj, exists, err := f.nodes.GetByKey(name)
	if err != nil || !exists {
		return nil, false
	}
	info, ok = obj.(*kubeinfo.NodeInfo)
	return info, ok
}

// NodeCount returns how many nodes the informer holds: the cluster's
// nodes, with or without GPUs, as kube-scheduler counts them.
func (f *Feeder) NodeCount() int { return int(f.nodeCount.Load()) }

// strip is the informers' transform: it keeps only what the extender reads.
func strip(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return kubeinfo.NewPodInfo(o), nil
	case *corev1.Node:
		return kubeinfo.NewNodeInfo(o), nil
	case *resourcev1.ResourceSlice:
		o.ManagedFields = nil
		return o, nil
	case *resourcev1.ResourceClaim:
		o.ManagedFields = nil
		return o, nil
	}
	return obj, nil
}
