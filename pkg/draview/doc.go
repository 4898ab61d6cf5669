// Package draview reads what the gpushare DRA driver (module dra) leaves in
// the API: the cards its ResourceSlices publish for each node, the memory
// its claims' allocations hold on them, and the memory a claim asks. The
// extender's cache (node choice for claim pods) and the kubectl plugin
// (the inspect table) both read DRA through it.
//
// The driver's contract, which dra/pkg/devices writes and a test there
// checks against this package: driver name gpu.gpushare.io; the pool of a
// node's slice is the node's name; one device per card, named gpu-<index>,
// with attributes index, uuid, model and isolation, a consumable capacity
// memory (bytes) whose request step is the node's unit (1 GiB or 1 MiB),
// and a NoSchedule or NoExecute taint while the card is unhealthy. The
// order of the devices in the slice is the order kube-scheduler's first
// fit tries them.
package draview
