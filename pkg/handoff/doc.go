// Package handoff matches the device IDs kubelet allocates to the pod
// container they are for; docs/design/device-plugin.md draws its design.
package handoff
