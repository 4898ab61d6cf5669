// Package devices is the DRA driver's model of a node's cards: one
// ResourceSlice device per card with consumable memory capacity, in the
// order kube-scheduler tries them, and the DeviceClass that selects them.
//
// A 16 GiB card with index 0 on a node counting in GiB is device gpu-0
// with capacity memory: 16Gi, requestPolicy {default: 16Gi, validRange:
// {min: 1Gi, step: 1Gi}} and allowMultipleAllocations: true. A claim of
// DeviceClass gpu-mem.gpushare.io asking capacity.requests.memory: 8Gi gets
// 8 GiB of one card; one asking none gets the whole card. kube-scheduler
// rounds a request up to the next whole unit: 9.5Gi takes 10Gi.
package devices
