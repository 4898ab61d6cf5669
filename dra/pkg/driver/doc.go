// Package driver runs gpushare's DRA driver on a node: it discovers the
// cards (NVML, or fakes), chooses their memory isolation as the device
// plugin does, restores the prepared claims from the checkpoint, serves
// kubelet's DRA plugin service through k8s.io/dynamic-resource-allocation's
// kubeletplugin helper (registering with kubelet), publishes the node's
// ResourceSlice, and taints the devices of cards a critical XID made
// unhealthy, reporting their health to kubelet too.
package driver
