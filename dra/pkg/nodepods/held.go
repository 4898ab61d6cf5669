package nodepods

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Finished reports whether none of pod's containers runs or will run
// again: its phase is Succeeded or Failed.
func Finished(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// HeldBy returns what pod, bound to node, holds on cards by the
// gpushare.io/allocation annotation the device plugin's pods carry: card
// UUID -> MiB. A pod that has finished, or carries no annotation, holds
// nothing. A share names its card by UUID, or by index when the UUID is
// absent or is no card of the node. An annotation that does not parse, or
// names another node, is an error, and the pod holds nothing known.
//
// A pod of 4 GiB on card 1 and 2 GiB on card 3, in GiB, holds
// {GPU-<1>: 4096, GPU-<3>: 2048}.
func HeldBy(pod *corev1.Pod, node string, cards []devices.Card) (map[string]int64, error) {
	v, ok := pod.Annotations[gpushare.AnnotationAllocation]
	if !ok || Finished(pod) {
		return nil, nil
	}
	a, err := gpushare.ParseAllocation(v)
	if err != nil {
		return nil, fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	if a.Node != node {
		return nil, fmt.Errorf("pod %s/%s is bound to node %s, and its %s names node %s", pod.Namespace, pod.Name, node, gpushare.AnnotationAllocation, a.Node)
	}
	uuids := map[int]string{} // card index -> the UUID the allocation gives it
	for _, c := range a.Containers {
		for _, d := range c.Devices {
			if d.UUID != "" {
				uuids[d.Index] = d.UUID
			}
		}
	}
	held := map[string]int64{}
	for idx, units := range a.PerCard() {
		c, ok := cardOf(cards, idx, uuids[idx])
		if !ok {
			return nil, fmt.Errorf("pod %s/%s: its %s names card %d (%s), which node %s does not have", pod.Namespace, pod.Name, gpushare.AnnotationAllocation, idx, uuids[idx], node)
		}
		held[c.UUID] += units * devices.UnitMiB(a.Unit)
	}
	return held, nil
}

// cardOf finds the card of UUID uuid, else the card of index idx.
func cardOf(cards []devices.Card, idx int, uuid string) (devices.Card, bool) {
	if uuid != "" {
		for _, c := range cards {
			if c.UUID == uuid {
				return c, true
			}
		}
	}
	for _, c := range cards {
		if c.Index == idx {
			return c, true
		}
	}
	return devices.Card{}, false
}

// ClaimsOf returns the names of the ResourceClaims pod uses, in its
// namespace: those it names and those made for it from templates; none
// once it has finished.
func ClaimsOf(pod *corev1.Pod) []string {
	if Finished(pod) {
		return nil
	}
	var out []string
	for _, c := range pod.Spec.ResourceClaims {
		if c.ResourceClaimName != nil {
			out = append(out, *c.ResourceClaimName)
		}
	}
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			out = append(out, *s.ResourceClaimName)
		}
	}
	return out
}
