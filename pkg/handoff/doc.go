// Package handoff works out which container kubelet is admitting, so that
// every container runs on the cards of the device IDs kubelet gave it and
// its pod's allocation annotation ends up naming those cards.
//
// kubelet calls GetPreferredAllocation, then Allocate, for one container
// at a time, and names no pod. A Handoff follows the node's pods and
// kubelet's view of them, one step per file:
//
//   - pods.go: the informer's pods of the node, each with its allocation
//     annotation and its containers that wait for devices.
//   - match.go: admission. Prefer picks the container kubelet is admitting:
//     the pod whose init container's IDs kubelet reuses, else the pod
//     PodResources lists as admitted, else the oldest bind. It steers
//     kubelet to its annotated cards. Allocate grants kubelet's IDs to the
//     container they are for, by three strategies: steered, reused,
//     matched. cards.go does the per-card arithmetic. catchup.go reads the
//     node's pods from the API server when the informer lags.
//   - verify.go: kubelet's PodResources is the truth. A grant kubelet gave
//     to another pod's container moves there; one it does not show after
//     a grace period goes.
//   - annotate.go: the allocation annotations are repaired, off the
//     Allocate path, to the cards the containers hold.
//   - legacy.go: pods that the previous device plugin, Aliyun's, admitted
//     keep their devices, advertised as units of their cards.
//
// The Handoff type draws a grant's states; docs/design/device-plugin.md
// has the whole design.
package handoff
