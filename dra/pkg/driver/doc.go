// Package driver runs gpushare's DRA driver on a node. It discovers the
// cards and chooses their memory isolation as the device plugin does. It
// restores the prepared claims from the checkpoint and serves kubelet's DRA
// plugin service through k8s.io/dynamic-resource-allocation's kubeletplugin
// helper. It publishes the node's ResourceSlice, taints the devices of cards
// a critical XID made unhealthy, and reports their health to kubelet.
package driver
