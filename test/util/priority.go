package util

import (
	"time"

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
