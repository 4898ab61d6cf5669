package kubeinfo

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// TestNewNodeInfo: a NodeInfo holds what SetNode reads of a node, the
// allocatable amounts before the capacity, and nothing else.
func TestNewNodeInfo(t *testing.T) {
	n := util.MakeNode("n1").Host("32", "128Gi").Cards("T4", 16, 16).Cordon("GPU-n1-0").Annotation("team", "a").Obj()
	n.UID, n.ResourceVersion = "uid-n1", "7"
	n.Status.Capacity[gpushare.ResourceGPUMem] = resource.MustParse("40") // allocatable (32) wins
	delete(n.Status.Allocatable, gpushare.ResourceGPUCount)               // capacity (2) then
	want := &NodeInfo{Name: "n1", UID: "uid-n1", ResourceVersion: "7", nodeReads: nodeReads{
		inventory: n.Annotations[gpushare.AnnotationInventory], hasInventory: true,
		cordoned: "GPU-n1-0", hasCordoned: true,
		gpuMem: 32, gpuCount: 2, milliCPU: 32000, memMiB: 128 << 10, hostKnown: true,
	}}
	if diff := cmp.Diff(want, NewNodeInfo(n), cmp.AllowUnexported(NodeInfo{}, nodeReads{})); diff != "" {
		t.Errorf("NewNodeInfo (-want +got):\n%s", diff)
	}
	if got := NewNodeInfo(util.MakeNode("bare").Obj()); got.hasInventory || got.hasCordoned || got.gpuMem != 0 || got.gpuCount != 0 {
		t.Errorf("NewNodeInfo of a node without GPUs = %+v", got)
	}
}

func TestSameNodeInputs(t *testing.T) {
	base := func() *corev1.Node { return util.MakeNode("n1").Cards("T4", 16, 16).Obj() }
	tests := []struct {
		name   string
		change func(n *corev1.Node)
		want   bool
	}{
		{"heartbeat", func(n *corev1.Node) {
			n.ResourceVersion = "43"
			n.Labels = map[string]string{"zone": "b"}
			n.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
		}, true},
		{"same quantity spelled otherwise", func(n *corev1.Node) {
			n.Status.Allocatable[corev1.ResourceMemory] = resource.MustParse("32768Mi")
		}, true},
		{"inventory changed", func(n *corev1.Node) {
			n.Annotations = util.MakeNode("n1").Cards("T4", 16, 16).Unhealthy(1).Obj().Annotations
		}, false},
		{"inventory removed", func(n *corev1.Node) { n.Annotations = nil }, false},
		{"inventory emptied", func(n *corev1.Node) { n.Annotations[gpushare.AnnotationInventory] = "" }, false},
		{"cordon added", func(n *corev1.Node) { n.Annotations[gpushare.AnnotationCordonedGPUs] = "GPU-n1-0" }, false},
		{"another annotation added", func(n *corev1.Node) { n.Annotations["team"] = "a" }, true},
		{"allocatable CPU changed", func(n *corev1.Node) {
			n.Status.Allocatable[corev1.ResourceCPU] = resource.MustParse("7")
		}, false},
		{"gpu-mem allocatable changed", func(n *corev1.Node) {
			n.Status.Allocatable[gpushare.ResourceGPUMem] = resource.MustParse("24")
		}, false},
		{"gpu-mem capacity changed under an allocatable", func(n *corev1.Node) {
			n.Status.Capacity[gpushare.ResourceGPUMem] = resource.MustParse("24")
		}, true},
		{"gpu-mem capacity changed without an allocatable", func(n *corev1.Node) {
			delete(n.Status.Allocatable, gpushare.ResourceGPUMem)
			n.Status.Capacity[gpushare.ResourceGPUMem] = resource.MustParse("24")
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			changed := base()
			tc.change(changed)
			// The informer compares what SetNode reads.
			if got := NewNodeInfo(base()).nodeReads == NewNodeInfo(changed).nodeReads; got != tc.want {
				t.Errorf("same inputs = %v, want %v", got, tc.want)
			}
		})
	}
}
