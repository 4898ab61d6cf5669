package preemption

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpushare/gpushare/pkg/feed"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// NodeReader reads the cluster's nodes from an informer (feed.Feeder).
type NodeReader interface {
	// Node returns node name; ok is false when the informer lacks it.
	Node(name string) (*kubeinfo.NodeInfo, bool)
	// NodeCount is the number of nodes, with or without GPUs.
	NodeCount() int
}

var _ NodeReader = (*feed.Feeder)(nil)

// nodeFilter is what kube-scheduler's own filters ask of a node for one pod
// beyond its resources:
//   - NodeUnschedulable: not cordoned, unless the pod tolerates it;
//   - TaintToleration: no NoSchedule or NoExecute taint the pod does not
//     tolerate;
//   - NodeAffinity: spec.nodeSelector and required node affinity.
//
// A preemption checks them on the nodes kube-scheduler did not send, where
// the pod's cards fit. A node there that fails them is no reason to evict
// nobody.
type nodeFilter struct {
	tolerations []corev1.Toleration
	affinity    nodeaffinity.RequiredNodeAffinity
}

// unschedulableTaint is the taint kube-scheduler's NodeUnschedulable
// checks a cordoned node's pods against.
var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

// newNodeFilter reads what the filters need of pod.
func newNodeFilter(pod *corev1.Pod) *nodeFilter {
	return &nodeFilter{tolerations: pod.Spec.Tolerations, affinity: nodeaffinity.GetRequiredNodeAffinity(pod)}
}

// usable reports whether n passes the filters for the pod.
func (f *nodeFilter) usable(n *kubeinfo.NodeInfo) bool {
	if n.Unschedulable && !f.tolerates(unschedulableTaint) {
		return false
	}
	// NodeInfo keeps only the NoSchedule and NoExecute taints.
	for _, taint := range n.Taints {
		if !f.tolerates(taint) {
			return false
		}
	}
	ok, err := f.affinity.Match(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: n.Labels.Map()}})
	return err == nil && ok
}

// tolerates reports whether one of the pod's tolerations tolerates taint,
// as kube-scheduler matches them. k8s.io/api has Toleration.ToleratesTaint,
// but its signature differs between the Kubernetes versions the extender
// builds against. An empty effect matches every effect, and an empty key
// (with Exists) every key. Exists matches every value, and Equal (or no
// operator) the same value. The comparison operators Lt and Gt of an alpha
// feature match nothing, as in a cluster without it.
func (f *nodeFilter) tolerates(taint corev1.Taint) bool {
	for _, t := range f.tolerations {
		if t.Effect != "" && t.Effect != taint.Effect || t.Key != "" && t.Key != taint.Key {
			continue
		}
		switch t.Operator {
		case corev1.TolerationOpExists:
			return true
		case "", corev1.TolerationOpEqual:
			if t.Value == taint.Value {
				return true
			}
		}
	}
	return false
}
