package kubeinfo

import (
	corev1 "k8s.io/api/core/v1"
)

// PodRequests returns the CPU (millicores) and memory (MiB, rounded up)
// that pod requests, as kube-scheduler's NodeResourcesFit counts them. That
// is the larger of two sums, plus the pod overhead. One is the app
// containers and restartable init containers (sidecars) together. The
// other is the largest init container with the sidecars started before it.
func PodRequests(pod *corev1.Pod) (milliCPU, memMiB int64) {
	var cpu, mem, sideCPU, sideMem int64 // memory in bytes
	for _, c := range pod.Spec.Containers {
		cpu += c.Resources.Requests.Cpu().MilliValue()
		mem += c.Resources.Requests.Memory().Value()
	}
	var initCPU, initMem int64
	for _, c := range pod.Spec.InitContainers {
		cc, cm := c.Resources.Requests.Cpu().MilliValue(), c.Resources.Requests.Memory().Value()
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sideCPU += cc
			sideMem += cm
			continue
		}
		initCPU, initMem = max(initCPU, sideCPU+cc), max(initMem, sideMem+cm)
	}
	cpu, mem = max(cpu+sideCPU, initCPU), max(mem+sideMem, initMem)
	cpu += pod.Spec.Overhead.Cpu().MilliValue()
	mem += pod.Spec.Overhead.Memory().Value()
	return cpu, (mem + 1<<20 - 1) >> 20
}

// NodeAllocatable returns the node's allocatable CPU (millicores) and
// memory (MiB, rounded down). Each falls back to capacity when the node
// reports no allocatable amount. known is false when it reports no CPU at
// all; the extender then scores the node by its cards alone.
func NodeAllocatable(node *corev1.Node) (milliCPU, memMiB int64, known bool) {
	cpu, ok := node.Status.Allocatable[corev1.ResourceCPU]
	if !ok {
		cpu, ok = node.Status.Capacity[corev1.ResourceCPU]
	}
	mem, mok := node.Status.Allocatable[corev1.ResourceMemory]
	if !mok {
		mem = node.Status.Capacity[corev1.ResourceMemory]
	}
	return cpu.MilliValue(), mem.Value() >> 20, ok
}
