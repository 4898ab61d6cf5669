package util

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Priority sets spec.priority, as the Priority admission plugin does from
// the pod's PriorityClass.
func (p *PodWrapper) Priority(v int32) *PodWrapper { p.Spec.Priority = &v; return p }

// PriorityClass sets spec.priorityClassName (the API server fills in
// spec.priority from it).
func (p *PodWrapper) PriorityClass(name string) *PodWrapper {
	p.Spec.PriorityClassName = name
	return p
}

// Label sets label k to v.
func (p *PodWrapper) Label(k, v string) *PodWrapper {
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels[k] = v
	return p
}

// Started sets status.startTime.
func (p *PodWrapper) Started(t time.Time) *PodWrapper {
	st := metav1.NewTime(t)
	p.Status.StartTime = &st
	return p
}

// Terminating sets a deletionTimestamp (a deleted pod in its grace period).
func (p *PodWrapper) Terminating() *PodWrapper {
	now := metav1.Now()
	p.DeletionTimestamp = &now
	return p
}

// NodeSelector adds k=v to spec.nodeSelector.
func (p *PodWrapper) NodeSelector(k, v string) *PodWrapper {
	if p.Spec.NodeSelector == nil {
		p.Spec.NodeSelector = map[string]string{}
	}
	p.Spec.NodeSelector[k] = v
	return p
}

// PreemptNever sets preemptionPolicy: Never (the pod evicts nobody).
func (p *PodWrapper) PreemptNever() *PodWrapper {
	never := corev1.PreemptNever
	p.Spec.PreemptionPolicy = &never
	return p
}

// Label sets node label k to v.
func (n *NodeWrapper) Label(k, v string) *NodeWrapper {
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[k] = v
	return n
}

// Unschedulable cordons the node (spec.unschedulable, as kubectl cordon).
func (n *NodeWrapper) Unschedulable() *NodeWrapper {
	n.Spec.Unschedulable = true
	return n
}

// Taint adds taint key=value with effect to the node.
func (n *NodeWrapper) Taint(key, value string, effect corev1.TaintEffect) *NodeWrapper {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: effect})
	return n
}

// Tolerate lets the pod tolerate taint key=value of effect.
func (p *PodWrapper) Tolerate(key, value string, effect corev1.TaintEffect) *PodWrapper {
	p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpEqual, Value: value, Effect: effect})
	return p
}
