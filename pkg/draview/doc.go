// Package draview reads what the gpushare DRA driver (module dra) leaves in
// the API: the cards its ResourceSlices publish for each node, the memory
// its claims' allocations hold on them, and the memory a claim asks.
//
// The extender's cache (node choice for claim pods) and the kubectl plugin
// (the inspect table) both read DRA through it. dra/pkg/devices writes the
// driver's contract, and a test there checks it against this package:
//   - the driver's name is gpu.gpushare.io;
//   - the pool of a node's slice is the node's name;
//   - one device per card, named gpu-<index>, with attributes index, uuid,
//     model and isolation;
//   - a consumable capacity memory (bytes), whose request step is the
//     node's unit (1 GiB or 1 MiB);
//   - a NoSchedule or NoExecute taint while the card is unhealthy;
//   - kube-scheduler's first fit tries the devices in their slice order.
package draview
