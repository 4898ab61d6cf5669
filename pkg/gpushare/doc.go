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
// the annotations below are in that node's unit. A pod's request is read in
// the unit of the node it lands on, unconverted. The one conversion: when
// the extender charges a bound pod's allocation annotation written in
// another unit than its node's inventory, Allocation.InUnit converts it to
// the node's, GiB to MiB times 1024, MiB to GiB rounding up (1500 MiB is 2
// GiB), so a share never shrinks.
//
// # Resources
//
//   - aliyun.com/gpu-mem: units of memory on one card (node capacity: the sum
//     over all cards).
//   - aliyun.com/gpu-count: number of cards. On a container (optional): how
//     many distinct cards the container's gpu-mem is split across, evenly
//     (gpu-mem 32, gpu-count 2 = 16 units on each of two cards); absent or
//     1: one card. The extender checks it against each card's memory; it is
//     not a consumable resource: the shipped scheduler configuration marks
//     it ignoredByScheduler and our device plugin publishes none on the
//     node (Aliyun's plugin publishes the node's number of cards, which the
//     extender reads only for a node without an inventory).
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
// # Choosing cards (pod annotations gpushare.io/gpu-*, node annotation gpushare.io/cordoned-gpus)
//
// A pod may restrict the cards its containers use; every container of the
// pod obeys the same annotations (ParseCardConstraints), each a list
// separated by commas, spaces around entries ignored:
//
//	gpushare.io/gpu-models            only cards whose model matches one of these patterns
//	gpushare.io/gpu-models-excluded   no card whose model matches one of these
//	gpushare.io/gpu-uuids             only these cards, by UUID
//	gpushare.io/gpu-uuids-excluded    none of these cards
//
// A model pattern is matched against the inventory's model (what NVML
// reports, e.g. "Tesla T4", "NVIDIA A100-SXM4-80GB"; kubectl inspect
// gpushare -o wide shows it) case-sensitively, '*' standing for any run of
// characters and '?' for one, and a space matching a hyphen ("Tesla-T4"
// matches "Tesla T4"); see MatchModel. UUIDs are exact. A card whose model
// or UUID is unknown (a node without an inventory) takes no pod whose
// annotations read that property. An invalid annotation (empty, an empty
// entry, a pattern in a UUID list, a UUID both required and excluded, over
// MaxCardListEntries entries or MaxCardListBytes) is an error: the
// extender's filter and bind answer it for the pod, which fits nowhere until
// it is fixed.
//
// An operator keeps new pods off cards with the node annotation
// gpushare.io/cordoned-gpus (UUIDs separated by commas; ParseCordonedGPUs);
// pods already on them keep them. An invalid value keeps every new GPU pod
// off the node until it is fixed.
//
// A pod annotated gpushare.io/isolation: enforced uses only cards whose
// inventory isolation enforces memory limits (driver or mps).
//
// The extender places a pod only on the cards its annotations allow, so its
// allocation annotation names only such cards; the device plugin relocates
// a container kubelet's free devices force elsewhere only among them.
//
// # Node inventory (node annotation gpushare.io/devices)
//
// Published by the device plugin: JSON Inventory with each card's index,
// UUID, model, memory in units, health and isolation (driver, mps or none;
// absent in inventories from before it, read as none). When it is absent the extender
// falls back to aliyun.com/gpu-mem capacity divided evenly by
// aliyun.com/gpu-count, with every card healthy and no UUIDs.
package gpushare
