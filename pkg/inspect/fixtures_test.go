package inspect

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// share is units on card index idx.
func share(idx int, uuid string, units int64) gpushare.DeviceShare {
	return gpushare.DeviceShare{Index: idx, UUID: uuid, Units: units}
}

// alloc is an allocation on node.
func alloc(node string, containers ...gpushare.ContainerAllocation) *gpushare.Allocation {
	return &gpushare.Allocation{Node: node, Unit: gpushare.UnitGiB, Containers: containers}
}

func container(name string, init bool, shares ...gpushare.DeviceShare) gpushare.ContainerAllocation {
	return gpushare.ContainerAllocation{Name: name, Init: init, Devices: shares}
}

// withIP sets the node's InternalIP (and an ExternalIP that must not win).
func withIP(n *corev1.Node, ip string) *corev1.Node {
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeExternalIP, Address: "203.0.113.9"}, {Type: corev1.NodeInternalIP, Address: ip}}
	return n
}

func withLabel(n *corev1.Node, k, v string) *corev1.Node {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[k] = v
	return n
}

// nodeA has two different cards: a 16 GiB T4 and an 80 GiB A100.
func nodeA() *corev1.Node {
	n := util.MakeNode("gpu-a").Inventory(&gpushare.Inventory{Unit: gpushare.UnitGiB, Devices: []gpushare.Device{
		{Index: 0, UUID: "GPU-a-0", Model: "Tesla-T4", Memory: 16, Healthy: true, Isolation: gpushare.IsolationMPS},
		{Index: 1, UUID: "GPU-a-1", Model: "A100-SXM4-80GB", Memory: 80, Healthy: true, Isolation: gpushare.IsolationDriver},
	}}).Capacity(96, 2).Obj()
	return withLabel(withIP(n, "10.0.0.1"), "pool", "a")
}

// podsA: a multi-container pod (init 10 on card 1; apps 4 on card 0 and 8
// on card 1: it holds 4 and max(8, 10) = 10), a pod of team-a, and a
// finished pod that holds nothing.
func podsA() []runtime.Object {
	return []runtime.Object{
		util.MakePod("train").InitGPUMem(10).GPUMem(4).GPUMem(8).Node("gpu-a").Allocation(alloc("gpu-a",
			container("i0", true, share(1, "GPU-a-1", 10)),
			container("c0", false, share(0, "GPU-a-0", 4)),
			container("c1", false, share(1, "GPU-a-1", 8)))).Obj(),
		util.MakePod("infer").Namespace("team-a").UID("uid-team-a-infer").GPUMem(6).Node("gpu-a").Allocation(alloc("gpu-a",
			container("c0", false, share(0, "GPU-a-0", 6)))).Obj(),
		util.MakePod("done").GPUMem(2).Node("gpu-a").Phase(corev1.PodSucceeded).Allocation(alloc("gpu-a",
			container("c0", false, share(0, "GPU-a-0", 2)))).Obj(),
	}
}

// nodeB has two 16 GiB T4s, the second unhealthy.
func nodeB() *corev1.Node {
	n := util.MakeNode("gpu-b").Cards("Tesla-T4", 16, 16).Unhealthy(1).Obj()
	return withLabel(withIP(n, "10.0.0.2"), "pool", "a")
}

// podsB: a two-card pod (8 + 8, placed before card 1 failed), a pod placed
// by Aliyun's scheduler (ALIYUN_COM_GPU_MEM_IDX only) and one bound without
// any annotation.
func podsB() []runtime.Object {
	return []runtime.Object{
		util.MakePod("big").GPUMemCards(16, 2).Node("gpu-b").Allocation(alloc("gpu-b",
			container("c0", false, share(0, "GPU-gpu-b-0", 8), share(1, "GPU-gpu-b-1", 8)))).Obj(),
		util.MakePod("legacy").GPUMem(4).Node("gpu-b").Annotation(gpushare.AnnotationIndex, "0").Obj(),
		util.MakePod("stray").GPUMem(2).Node("gpu-b").Obj(),
	}
}

// nodeC publishes no inventory: 32 GiB over 2 cards from its capacity.
func nodeC() *corev1.Node {
	return withLabel(withIP(util.MakeNode("gpu-c").Capacity(32, 2).Obj(), "10.0.0.3"), "pool", "b")
}

// podsC: a bound pod of team-a, and a pending one created from YAML copied
// off a running pod, allocation annotation included: ignored, it holds
// nothing.
func podsC() []runtime.Object {
	return []runtime.Object{
		util.MakePod("notebook").Namespace("team-a").UID("uid-team-a-notebook").GPUMem(4).Node("gpu-c").Allocation(alloc("gpu-c",
			container("c0", false, share(1, "", 4)))).Obj(),
		util.MakePod("copied").GPUMem(6).Allocation(alloc("gpu-c", container("c0", false, share(0, "", 6)))).Obj(),
	}
}

// pending pods: one not yet tried, one the scheduler could not place, and
// one asking no GPU memory (not listed).
func pending() []runtime.Object {
	tooBig := util.MakePod("too-big").GPUMem(100).Obj()
	tooBig.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/4 nodes are available: 3 Insufficient aliyun.com/gpu-mem, 1 node(s) didn't match the extender."}}
	return []runtime.Object{
		util.MakePod("waiting").GPUMem(8).Obj(),
		tooBig,
		util.MakePod("web").Container("nginx").Obj(),
	}
}

// nodeMiB reports MiB.
func nodeMiB() *corev1.Node {
	n := util.MakeNode("gpu-mib").Inventory(&gpushare.Inventory{Unit: gpushare.UnitMiB, Devices: []gpushare.Device{
		{Index: 0, UUID: "GPU-m-0", Model: "Tesla-V100-SXM2-16GB", Memory: 16160, Healthy: true},
	}}).Capacity(16160, 1).Obj()
	return withIP(n, "10.0.0.4")
}

func podsMiB() []runtime.Object {
	return []runtime.Object{
		util.MakePod("small").GPUMem(3000).Node("gpu-mib").Allocation(&gpushare.Allocation{Node: "gpu-mib", Unit: gpushare.UnitMiB,
			Containers: []gpushare.ContainerAllocation{container("c0", false, share(0, "GPU-m-0", 3000))}}).Obj(),
	}
}

func cpuOnly() *corev1.Node {
	return withIP(util.MakeNode("cpu-only").Obj(), "10.0.0.9")
}

// cluster is every fixture together.
func cluster() []runtime.Object {
	objs := []runtime.Object{nodeA(), nodeB(), nodeC(), cpuOnly()}
	for _, pods := range [][]runtime.Object{podsA(), podsB(), podsC(), pending()} {
		objs = append(objs, pods...)
	}
	return objs
}

func join(groups ...[]runtime.Object) []runtime.Object {
	var out []runtime.Object
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func objs(o ...runtime.Object) []runtime.Object { return o }

// brokenInventory has an unreadable inventory (cards from its capacity) and
// a pod holding memory on a card index the node does not have.
func brokenInventory() []runtime.Object {
	n := util.MakeNode("gpu-d").Capacity(32, 2).Obj()
	n.Annotations = map[string]string{gpushare.AnnotationInventory: `{"unit":"GiB","devices":[`}
	return []runtime.Object{
		withIP(n, "10.0.0.5"),
		util.MakePod("ghost-card").GPUMem(4).Node("gpu-d").Allocation(alloc("gpu-d", container("c0", false, share(3, "GPU-gone", 4)))).Obj(),
		util.MakePod("ok").GPUMem(5).Node("gpu-d").Allocation(alloc("gpu-d", container("c0", false, share(1, "", 5)))).Obj(),
	}
}

// cardsChosen: gpu-e has a T4, cordoned by the operator after pod old
// landed on it (the annotation also names a card the node lacks), and an
// A100 with 72 GiB held; gpu-f's cordon annotation is invalid. Pending: a
// pod asking an A100 that the scheduler could not place, one with an
// invalid card annotation, and one that does not choose.
func cardsChosen() []runtime.Object {
	e := util.MakeNode("gpu-e").Inventory(&gpushare.Inventory{Unit: gpushare.UnitGiB, Devices: []gpushare.Device{
		{Index: 0, UUID: "GPU-e-0", Model: "Tesla T4", Memory: 16, Healthy: true},
		{Index: 1, UUID: "GPU-e-1", Model: "A100-SXM4-80GB", Memory: 80, Healthy: true},
	}}).Capacity(96, 2).Cordon("GPU-e-0", "GPU-gone").Obj()
	f := util.MakeNode("gpu-f").Cards("Tesla T4", 16).Cordon("GPU-gpu-f-0", "").Obj()
	waiting := util.MakePod("a100-job").GPUMem(12).GPUModels("A100*").Obj()
	waiting.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/2 nodes are available: 1 container c0 needs 12 GiB on one GPU of model A100*; 1 GPU excluded (cordoned by the operator: 1); " +
			"largest free eligible GPU has 8 of 80 GiB, 1 invalid gpushare annotation gpushare.io/cordoned-gpus: entry 2 of \"GPU-gpu-f-0,\" is empty; " +
			"remove the extra comma; the node takes no new GPU pods until the annotation is fixed."}}
	return []runtime.Object{
		withIP(e, "10.0.0.6"), withIP(f, "10.0.0.7"),
		util.MakePod("old").GPUMem(6).Node("gpu-e").Allocation(alloc("gpu-e", container("c0", false, share(0, "GPU-e-0", 6)))).Obj(),
		util.MakePod("big").GPUMem(72).Node("gpu-e").Allocation(alloc("gpu-e", container("c0", false, share(1, "GPU-e-1", 72)))).Obj(),
		waiting,
		util.MakePod("typo").GPUMem(4).Annotation(gpushare.AnnotationGPUUUIDs, "GPU-e-*").Obj(),
		util.MakePod("plain").GPUMem(2).Obj(),
	}
}
