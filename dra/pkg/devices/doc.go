// Package devices is the DRA driver's model of a node's cards: one
// ResourceSlice device per card with consumable memory capacity, in the
// order kube-scheduler tries them, and the DeviceClass that selects them.
//
// A 16 GiB card with index 0 on a node counting in GiB is device gpu-0
// with capacity memory: 16Gi, requestPolicy {default: 16Gi, validRange:
// {min: 1Gi, step: 1Gi}} and allowMultipleAllocations: true. A claim of
// DeviceClass gpu-mem.gpushare.io asking capacity.requests.memory: 8Gi gets
// 8 GiB of one card; one asking none gets the whole card. A request that is
// not a whole number of units is rounded up to the next step by
// kube-scheduler (9.5Gi takes 10Gi).
//
// Inside a node kube-scheduler takes the first device with room, in slice
// order: the order of the devices is the only lever against
// fragmentation (Order).
package devices
