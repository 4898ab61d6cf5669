package util

import (
	"fmt"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// PreemptionCluster is the review's D2 cluster: 500 nodes of 8 × 16 GiB
// A10 cards, each card holding a 9 GiB pod of priority 0 (4,000 pods,
// labelled, in namespace batch) and 1,000 PodDisruptionBudgets in batch
// that select none of them. It returns the objects and the node names.
// Pods asking for A10 cards fit no other node of a fixture.
func PreemptionCluster() ([]runtime.Object, []string) {
	var objs []runtime.Object
	var names []string
	for i := range 500 {
		n := fmt.Sprintf("node-%03d", i)
		names = append(names, n)
		objs = append(objs, MakeNode(n).Cards("A10", 16, 16, 16, 16, 16, 16, 16, 16).Obj())
		for c := range 8 {
			a := &gpushare.Allocation{Node: n, Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
				{Name: "c0", Devices: []gpushare.DeviceShare{{Index: c, UUID: fmt.Sprintf("GPU-%s-%d", n, c), Units: 9}}}}}
			objs = append(objs, MakePod(fmt.Sprintf("%s-%d", n, c)).Namespace("batch").GPUMem(9).Node(n).Allocation(a).Label("app", "batch").Obj())
		}
	}
	for i := range 1000 {
		objs = append(objs, &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Namespace: "batch", Name: fmt.Sprintf("pdb-%04d", i)},
			Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"x": fmt.Sprintf("nomatch-%d", i)}}},
			Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1},
		})
	}
	return objs, names
}
