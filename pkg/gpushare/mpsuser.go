package gpushare

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// MPSUser is the Linux user a pod's MPS clients run as, from PodMPSUser.
// The zero value is MPSUserNone.
type MPSUser int64

const (
	// MPSUserNone: no container of the pod would be an MPS client.
	MPSUserNone MPSUser = 0
	// MPSUserImage: the client sets no runAsUser; its image's user decides,
	// which nothing outside the node can see. Two such clients count as one
	// user.
	MPSUserImage MPSUser = -1
)

// MPSUserOf is runAsUser uid as an MPSUser.
func MPSUserOf(uid int64) MPSUser { return MPSUser(uid + 1) }

// String names the user: "runAsUser 1000", "no runAsUser (its image's
// user)" or "no MPS client".
func (u MPSUser) String() string {
	switch {
	case u == MPSUserImage:
		return "no runAsUser (its image's user)"
	case u > 0:
		return "runAsUser " + strconv.FormatInt(int64(u)-1, 10)
	}
	return "no MPS client"
}

// RunAsUser returns container c's effective runAsUser in pod: its
// securityContext.runAsUser, else the pod's; ok is false when neither is
// set.
func RunAsUser(pod *corev1.Pod, c *corev1.Container) (uid int64, ok bool) {
	if c.SecurityContext != nil && c.SecurityContext.RunAsUser != nil {
		return *c.SecurityContext.RunAsUser, true
	}
	if sc := pod.Spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
		return *sc.RunAsUser, true
	}
	return 0, false
}

// PodMPSUser returns the Linux user the MPS clients among pod's containers
// run as. A client is a container that asks GPU memory on one card and is
// not a plain init container: a container on several cards runs without MPS,
// and a plain init container has exited before the others start. The user
// is the first client's RunAsUser, MPSUserImage when it sets none, and
// MPSUserNone when the pod has no client. An MPS server serves one user at a
// time. So the device plugin refuses a client on a card whose clients run as
// another user, and the extender keeps the pod off such cards
// (docs/memory-isolation.md).
func PodMPSUser(pod *corev1.Pod, demand Demand) MPSUser {
	for _, d := range demand {
		if d.Init || d.Cards != 1 {
			continue
		}
		c := containerNamed(pod, d.Name)
		if c == nil {
			continue
		}
		if uid, ok := RunAsUser(pod, c); ok {
			return MPSUserOf(uid)
		}
		return MPSUserImage
	}
	return MPSUserNone
}

// containerNamed returns pod's container or init container called name.
func containerNamed(pod *corev1.Pod, name string) *corev1.Container {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i]
			}
		}
	}
	return nil
}
