// Package gpushare is the contract shared by the scheduler extender, the
// device plugin and the kubectl plugin: resource names, annotation keys, the
// node inventory and pod allocation formats, and the rule that turns a pod's
// containers into a GPU-memory demand.
//
// # Units
//
// GPU memory is counted in whole "units". A node's device plugin decides the
// unit (GiB by default, MiB optionally) and reports it in the node inventory
// annotation; aliyun.com/gpu-mem capacity, pod requests and every number in
// the annotations below are in that node's unit. The extender never converts
// between units.
//
// # Resources
//
//   - aliyun.com/gpu-mem: units of memory on one card (node capacity: the sum
//     over all cards).
//   - aliyun.com/gpu-count: number of cards. On a node: how many cards it has.
//     On a container (optional): how many distinct cards the container's
//     gpu-mem is split across, evenly (gpu-mem 32, gpu-count 2 = 16 units on
//     each of two cards). Absent or 1: one card.
//
// # Annotations written at bind (pod)
//
// The ALIYUN_COM_* keys keep existing tools working; AnnotationAllocation is
// the source of truth for multi-container and multi-card pods.
//
//	ALIYUN_COM_GPU_MEM_IDX          index of the card of the first GPU container
//	ALIYUN_COM_GPU_MEM_POD          the pod's total units (sum over all cards)
//	ALIYUN_COM_GPU_MEM_DEV          total units of that card
//	ALIYUN_COM_GPU_MEM_ASSIGNED     "false" until the device plugin allocates
//	ALIYUN_COM_GPU_MEM_ASSUME_TIME  bind time, Unix nanoseconds
//	gpushare.io/allocation          JSON Allocation: per container, cards by
//	                                index and UUID with the units on each
//
// # Node inventory (node annotation gpushare.io/devices)
//
// Published by the device plugin: JSON Inventory with each card's index,
// UUID, model, memory in units and health. When it is absent the extender
// falls back to aliyun.com/gpu-mem capacity divided evenly by
// aliyun.com/gpu-count, with every card healthy and no UUIDs.
package gpushare
