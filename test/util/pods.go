package util

import corev1 "k8s.io/api/core/v1"

// SchedulingFailed reports whether kube-scheduler has tried pod and found
// no node for it or failed with an error (an extender it could not reach):
// unbound, with condition PodScheduled=False.
func SchedulingFailed(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return true
		}
	}
	return false
}
