package cache

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// PodRequests is kubeinfo.PodRequests: the CPU (millicores) and memory
// (MiB, rounded up) pod requests as kube-scheduler's NodeResourcesFit
// counts them.
func PodRequests(pod *corev1.Pod) (milliCPU, memMiB int64) { return kubeinfo.PodRequests(pod) }

// NodeAllocatable is kubeinfo.NodeAllocatable: the node's allocatable CPU
// (millicores) and memory (MiB, rounded down); known is false when it
// reports no CPU.
func NodeAllocatable(node *corev1.Node) (milliCPU, memMiB int64, known bool) {
	return kubeinfo.NodeAllocatable(node)
}
