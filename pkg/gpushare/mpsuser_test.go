package gpushare

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestPodMPSUser(t *testing.T) {
	uid := func(u int64) *int64 { return &u }
	gpu := func(name string, units, cards string, user *int64) corev1.Container {
		c := corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{ResourceGPUMem: resource.MustParse(units)}}}
		if cards != "" {
			c.Resources.Limits[ResourceGPUCount] = resource.MustParse(cards)
		}
		if user != nil {
			c.SecurityContext = &corev1.SecurityContext{RunAsUser: user}
		}
		return c
	}
	tests := []struct {
		name string
		pod  corev1.Pod
		want MPSUser
	}{
		{"no runAsUser", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{gpu("a", "4", "", nil)}}}, MPSUserImage},
		{"the container's", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{gpu("a", "4", "", uid(1000))}}}, MPSUserOf(1000)},
		{"root", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{gpu("a", "4", "", uid(0))}}}, MPSUserOf(0)},
		{"the pod's", corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: uid(7)},
			Containers: []corev1.Container{gpu("a", "4", "", nil)}}}, MPSUserOf(7)},
		{"the container's over the pod's", corev1.Pod{Spec: corev1.PodSpec{SecurityContext: &corev1.PodSecurityContext{RunAsUser: uid(7)},
			Containers: []corev1.Container{gpu("a", "4", "", uid(8))}}}, MPSUserOf(8)},
		{"a container on two cards is no MPS client", corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{gpu("a", "4", "2", uid(1))}}}, MPSUserNone},
		{"a plain init container is no MPS client beside the others", corev1.Pod{Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{gpu("init", "4", "", uid(1))}, Containers: []corev1.Container{gpu("a", "4", "", uid(2))}}}, MPSUserOf(2)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := PodDemand(&tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if got := PodMPSUser(&tc.pod, d); got != tc.want {
				t.Errorf("PodMPSUser = %v, want %v", got, tc.want)
			}
		})
	}
	if got := MPSUserOf(1000).String(); got != "runAsUser 1000" {
		t.Errorf("String = %q", got)
	}
}
