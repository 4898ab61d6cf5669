package kubeinfo

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// NodeInfo is what the extender keeps of a node, read once when the node
// arrives. The node informer stores NodeInfo instead of the Node, as the
// pod informer stores PodInfo: even a stripped Node costs kilobytes
// (measured: docs/benchmarks.md#what-the-informers-objects-cost).
type NodeInfo struct {
	Name            string
	UID             types.UID
	ResourceVersion string
	// Unschedulable, Taints and Labels are what kube-scheduler's own
	// filters read of the node: spec.unschedulable, the taints of effect
	// NoSchedule or NoExecute, and the labels. A preemption checks them on
	// the nodes kube-scheduler did not send it. The cache never reads them.
	Unschedulable bool
	Taints        []corev1.Taint
	Labels        LabelSet
	nodeReads
}

// nodeReads is all that cache.Cache.SetNode reads of a node. It is
// comparable with ==, and two versions of a node that agree on it need no
// SetNode.
type nodeReads struct {
	// inventory and cordoned are the node's gpushare.io/inventory and
	// gpushare.io/cordoned-gpus annotations. hasInventory and hasCordoned say
	// whether it carries them.
	inventory, cordoned       string
	hasInventory, hasCordoned bool
	// gpuMem and gpuCount are the node's allocatable (else capacity)
	// aliyun.com/gpu-mem (units) and aliyun.com/gpu-count, 0 when absent.
	gpuMem, gpuCount int64
	// milliCPU and memMiB are as NodeAllocatable returns them. hostKnown: the
	// node reports its CPU.
	milliCPU, memMiB int64
	hostKnown        bool
}

// SameReads reports whether n and o agree on all that SetNode reads, so
// that an update from one to the other needs no SetNode.
func (n *NodeInfo) SameReads(o *NodeInfo) bool { return n.nodeReads == o.nodeReads }

// SameAnnotations reports whether n and o carry the same
// gpushare.io/devices and gpushare.io/cordoned-gpus values.
func (n *NodeInfo) SameAnnotations(o *NodeInfo) bool {
	return n.inventory == o.inventory && n.cordoned == o.cordoned
}

// Inventory returns the node's gpushare.io/devices annotation, ok false
// when it carries none.
func (n *NodeInfo) Inventory() (inv string, ok bool) { return n.inventory, n.hasInventory }

// CordonedGPUs returns the node's gpushare.io/cordoned-gpus annotation, ok
// false when it carries none.
func (n *NodeInfo) CordonedGPUs() (uuids string, ok bool) { return n.cordoned, n.hasCordoned }

// GPUs returns the node's allocatable (else capacity) aliyun.com/gpu-mem
// (units) and aliyun.com/gpu-count, 0 when absent.
func (n *NodeInfo) GPUs() (mem, count int64) { return n.gpuMem, n.gpuCount }

// Host returns the node's allocatable CPU (millicores) and memory (MiB) as
// NodeAllocatable returns them; known is false when it reports no CPU.
func (n *NodeInfo) Host() (milliCPU, memMiB int64, known bool) {
	return n.milliCPU, n.memMiB, n.hostKnown
}

// NewNodeInfo extracts a NodeInfo from a node.
func NewNodeInfo(node *corev1.Node) *NodeInfo {
	info := &NodeInfo{Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion}
	info.inventory, info.hasInventory = node.Annotations[gpushare.AnnotationInventory]
	info.cordoned, info.hasCordoned = node.Annotations[gpushare.AnnotationCordonedGPUs]
	info.gpuMem, info.gpuCount = quantity(node, gpushare.ResourceGPUMem), quantity(node, gpushare.ResourceGPUCount)
	info.milliCPU, info.memMiB, info.hostKnown = NodeAllocatable(node)
	info.Unschedulable = node.Spec.Unschedulable
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			info.Taints = append(info.Taints, t)
		}
	}
	info.Labels = NewLabelSet(node.Labels)
	return info
}

// GetName and GetNamespace are the node's (klog.KObj reads them).
func (n *NodeInfo) GetName() string      { return n.Name }
func (n *NodeInfo) GetNamespace() string { return "" }

// GetObjectMeta makes the node's metadata for the informer's store: its
// key, and a deleted node's resourceVersion. It makes a NodeInfo a
// metav1.ObjectMetaAccessor, which meta.Accessor takes.
func (n *NodeInfo) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion}
}

// quantity returns the node's allocatable amount of r, else its capacity.
func quantity(node *corev1.Node, r corev1.ResourceName) int64 {
	if q, ok := node.Status.Allocatable[r]; ok {
		return q.Value()
	}
	if q, ok := node.Status.Capacity[r]; ok {
		return q.Value()
	}
	return 0
}
