package gpushare

import corev1 "k8s.io/api/core/v1"

// Extended resources.
const (
	// ResourceGPUMem is GPU memory in the node's unit (see Inventory.Unit).
	ResourceGPUMem corev1.ResourceName = "aliyun.com/gpu-mem"
	// ResourceGPUCount is a number of cards.
	ResourceGPUCount corev1.ResourceName = "aliyun.com/gpu-count"
	// ResourceDRAClaim marks a pod whose GPU memory comes through a claim
	// of the gpushare DRA driver and whose node the extender chooses. With
	// the extender's --dra-node-choice, the webhook gives it to a converted
	// pod's container. kube-scheduler's configuration lists it as an
	// extender's managed resource with ignoredByScheduler: the scheduler
	// sends such pods to the extender's filter and counts the marker
	// nowhere. kubelet drops it at admission, as no node advertises it. Its
	// quantity is the claim's memory in the pod's aliyun.com/gpu-mem units,
	// for ResourceQuota (requests.gpushare.io/dra-claim) to count. The
	// extender reads only its presence.
	ResourceDRAClaim corev1.ResourceName = "gpushare.io/dra-claim"
)

// Pod annotations compatible with Aliyun's gpushare.
const (
	AnnotationIndex      = "ALIYUN_COM_GPU_MEM_IDX"
	AnnotationPodMem     = "ALIYUN_COM_GPU_MEM_POD"
	AnnotationDevMem     = "ALIYUN_COM_GPU_MEM_DEV"
	AnnotationAssigned   = "ALIYUN_COM_GPU_MEM_ASSIGNED"
	AnnotationAssumeTime = "ALIYUN_COM_GPU_MEM_ASSUME_TIME"
)

// Annotations of our own.
const (
	// AnnotationAllocation (pod) holds the JSON Allocation written at bind.
	AnnotationAllocation = "gpushare.io/allocation"
	// AnnotationPolicy (pod) overrides the extender's scoring policy for one
	// pod, e.g. "binpack".
	AnnotationPolicy = "gpushare.io/policy"
	// AnnotationInventory (node) holds the JSON Inventory published by the
	// device plugin.
	AnnotationInventory = "gpushare.io/devices"
)

// Memory units a node may report in.
const (
	UnitGiB = "GiB"
	UnitMiB = "MiB"
)

// DefaultUnit is the unit assumed when a node publishes no inventory.
const DefaultUnit = UnitGiB

// AsksDRAClaim reports whether a container or init container of pod asks
// ResourceDRAClaim, in its limits or requests.
func AsksDRAClaim(pod *corev1.Pod) bool {
	for _, list := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			r := &list[i].Resources
			if _, ok := r.Limits[ResourceDRAClaim]; ok {
				return true
			}
			if _, ok := r.Requests[ResourceDRAClaim]; ok {
				return true
			}
		}
	}
	return false
}
