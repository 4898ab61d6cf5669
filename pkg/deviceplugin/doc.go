// Package deviceplugin is the gpushare device plugin: it advertises a
// node's GPU memory to kubelet as aliyun.com/gpu-mem and runs every
// container on the card(s) that its pod's allocation annotation names.
//
// # Devices
//
// Each card is advertised as one device per unit of its memory (GiB by
// default, MiB optionally; rounded down, so a 15360 MiB T4 is 15 GiB), with
// IDs "<UUID>::<k>", k = 0 .. units-1. Cards of different sizes are
// reported exactly. kubelet gives each ID to at most one container and
// never an unhealthy one, so its own accounting keeps every card within its
// memory. The ListAndWatch message (one entry per unit) must stay under
// kubelet's 4 MiB gRPC limit: the plugin computes its size at start and
// refuses a unit that does not fit, naming one that does (one 80 GiB card
// in MiB is 81920 devices, 4.8 MiB). An aliyun.com/gpu-count capacity is
// removed from the node status (kubelet would count pods' card counts
// against it; see Publisher), and the inventory annotation
// gpushare.io/devices (index, UUID, model, memory in units, health) is
// published and re-asserted every minute and on every health change.
//
// Health: a critical XID (NVIDIA's application XIDs 13, 31, 43, 45, 68 and
// 109 excepted) marks its card unhealthy, in ListAndWatch and the
// inventory; it comes back once --recovery-window has passed without one
// and NVML still answers for the card (see gpu.Health).
//
// # The handoff
//
// kubelet admits a pod's containers one at a time, init containers first,
// each list in spec order; for each container asking aliyun.com/gpu-mem it
// calls GetPreferredAllocation(available IDs, IDs it must include, size)
// and then Allocate(IDs). Neither call names the pod. The plugin keeps two
// invariants:
//
//  1. A container runs on the cards its IDs are on. Allocate derives the
//     environment (NVIDIA_VISIBLE_DEVICES=<UUIDs> and the rest, below) from
//     the IDs, never from a guess about the pod, so kubelet's accounting
//     is what stands between a card and over-commit.
//  2. The pod's gpushare.io/allocation annotation ends up naming, for each
//     container, the cards of the IDs kubelet gave it. Where it did not
//     already, the plugin repairs it (and ALIYUN_COM_GPU_MEM_IDX, _DEV and
//     _POD), records a GPUAllocationRepaired event, and logs it.
//
// To make repairs rare, the plugin works out which container kubelet is
// admitting and steers kubelet to that container's annotated cards:
//
//   - GetPreferredAllocation picks the container. If kubelet must include
//     IDs, they are an init container's that kubelet reuses for the next
//     container of the same pod, which names the pod exactly. Otherwise it
//     asks kubelet's PodResources API (--kubelet-dir/pod-resources): kubelet
//     adds a pod to its pod manager before admitting it, so the one pod it
//     lists with containers still unallocated is the pod under admission.
//     Without that answer it takes the oldest bind (ALIYUN_COM_GPU_MEM_ASSUME_TIME).
//     The container is that pod's first one without a grant, which must ask
//     exactly size units. The answer is the lowest free IDs of the cards
//     its annotation names, or, when kubelet's accounting has no room there
//     (the extender and kubelet disagree), of the best-fitting other cards
//     that the pod's gpushare.io/gpu-* annotations allow (allocator.Exclude;
//     none: the admission fails, naming the cards they exclude). The
//     operator's gpushare.io/cordoned-gpus is the scheduler's business: it
//     keeps new pods off a card, and a relocated pod was scheduled already.
//   - Allocate receives exactly those IDs (kubelet takes a complete
//     preference) and grants them to that container. IDs it did not
//     prefer are matched by an init container's reused IDs, else to a
//     waiting container whose annotation names exactly these cards and
//     units (all such are interchangeable), else to one of the same shape
//     elsewhere whose card annotations allow these cards. IDs that do not
//     form the container's shape (Cards cards of Units each), or that lie
//     elsewhere on cards its annotations exclude, are refused. Every grant is also kept in memory, so the
//     next calls skip granted containers; ASSIGNED becomes "true" once all
//     of a pod's containers hold grants (written asynchronously).
//   - Verification: 300 ms after each Allocate and every --verify-period,
//     the plugin reads PodResources, where kubelet lists the IDs each
//     (app or restartable init) container holds. Those are the truth: a
//     grant that kubelet shows applied to another pod's container moves to
//     that container (a guess went to the wrong pod; the right one will be
//     admitted later and matched then), and the annotations are repaired to
//     match. A grant kubelet does not show after a 10 s grace is revoked.
//
// The plugin learns of pods from its informer (the pods of its node), and
// kubelet from a watch of its own, so kubelet often admits a pod before
// the informer has delivered it: milliseconds after the bind, and on a
// loaded node the delivery can land while a call is matching. A new pod may
// also have taken the name of a pod whose deletion the informer has not
// delivered yet. So when no container waits for the size kubelet asks,
// either call reads the node's pods from the API server (one consistent
// list, field selector spec.nodeName=<node>), adds those it does not know
// by UID, forgets those it knew before the read that the API server no
// longer has, and matches once more, also when the read failed (the
// informer may have delivered the pod meanwhile). This also covers a
// kubelet whose PodResources does not answer or does not list the pod
// under admission. A call that finds a waiting container reads nothing
// from the API server.
//
// When still no container waits for the size kubelet asks, both calls
// fail with FailedPrecondition and a message naming the node, the size,
// the pods that wait and why other pods cannot be matched (no allocation
// annotation, allocation for another node or unit, spec and annotation
// disagree), and the reads that failed on the way; kubelet reports it as
// the pod's admission failure. A pod never starts with a fake device name.
//
// Bounds and failures: kubelet makes both calls without a deadline, so
// every read made while it waits is bounded (PodResources List 2 s, the
// API server list of the node's pods 3 s). A panic in any RPC
// becomes codes.Internal for that call, logged once with the stack; the
// server serves on. The informer handler treats an update that changes a
// pod's UID (a pod re-created under its name while the watch was down,
// delivered by the relist as one update) as a delete and an add, and
// every annotation patch carries the pod's UID, which kube-apiserver
// refuses to change, so a patch meant for a deleted pod fails instead of
// landing on its successor.
//
// Init containers: kubelet hands a non-restartable init container's IDs on
// to the following containers of the same pod before anything else, so
// those containers run on the init container's card whatever the
// annotation said; the annotation is then repaired. This stays inside what
// the pod reserved on that card (the larger of its largest init container
// and its app containers there). The extender places init containers on
// their app containers' cards when it can, which avoids it. If reused IDs
// and kubelet's free IDs cannot form a container's shape (the init
// container's card has no other free units), GetPreferredAllocation or
// Allocate fails, naming the card.
//
// Restarts: a kubelet restart re-creates kubelet.sock and wipes plugin
// sockets; the plugin serves and registers again (also on SIGHUP, and a
// second after kubelet closes its last ListAndWatch stream without
// restarting: kubelet drops a plugin that registered while an older one
// of the resource was still connected, once that one's connection ends),
// and its grants carry over. A restarted plugin rebuilds grants from PodResources
// and trusts ASSIGNED=true annotations until kubelet lists such a pod
// without devices. It refuses to start in a unit other than the one the
// node's inventory was published in while PodResources lists containers
// holding devices: their IDs were handed out in the old unit
// (CheckUnitChange).
//
// # Pods of the previous device plugin
//
// A node switched from Aliyun's gpushare-device-plugin (same resource
// name) keeps running the pods that plugin admitted, and kubelet keeps
// their device IDs, "<UUID>-_-<n>", in its checkpoint. This plugin never
// advertises those IDs, so kubelet would count them in use on no card and
// hand every unit of every card out again: new containers on the memory
// the old pods fill. Aliyun's plugin also ignored which IDs kubelet gave
// (it ran a container on the card ALIYUN_COM_GPU_MEM_IDX names), so an
// ID's UUID says nothing about the card.
//
// The plugin adopts them (legacy.go). A pod is legacy when kubelet's
// PodResources lists device IDs for it that are not this plugin's; it is
// never matched, granted (a grant restored from ASSIGNED=true, which
// Aliyun's plugin wrote too, is dropped) or patched. Its IDs are
// advertised, healthy, as units of the card its ALIYUN_COM_GPU_MEM_IDX
// names (on a one-card node, that card, which Aliyun's plugin gave any
// pod), in place of as many of that card's own IDs: a 16 GiB card under
// 6 GiB of legacy pods is advertised as UUID::0 .. UUID::9 plus their 6
// IDs. kubelet counts those 6 in use on that card and never hands them
// out, and the node's allocatable stays the cards' 16 GiB, so kube-
// scheduler and kubelet's admission, which subtract the legacy pods'
// requests from it, count them once. (Reporting 6 of the card's own IDs
// Unhealthy instead would keep kubelet's device accounting right but cut
// allocatable to 10 while the requests still count the 6: the node would
// look 6 GiB fuller than it is until the legacy pods end.) A legacy pod
// whose index names no card of a multi-card node got no card from
// Aliyun's plugin (NVIDIA_VISIBLE_DEVICES=no-gpu-has-…); its IDs are not
// advertised. The inventory keeps every card's full size: the extender
// charges legacy pods itself (by ALIYUN_COM_GPU_MEM_IDX), so nothing is
// counted twice.
//
// The adopted IDs go when the pod does: the informer deletes it or shows
// it finished, or PodResources lists it without them. The card's own IDs
// then come back (ListAndWatch re-sends). A pod merely missing from a
// PodResources answer (a kubelet restarting) keeps them. Until kubelet
// has the new list, it may offer a freed legacy ID to
// GetPreferredAllocation; the plugin never prefers one (at worst a
// container goes to another card with room and the annotation is
// repaired, as usual) and Allocate refuses one.
//
// Before it first registers, the plugin reads PodResources (three tries),
// so the first list kubelet sees already holds the legacy IDs; it refuses
// to start when kubelet does not answer and pods on the node may hold
// devices (running, ASSIGNED=true, or without a usable allocation). It
// also refuses a unit other than the one Aliyun's components ran with,
// which ALIYUN_COM_GPU_MEM_DEV shows (a factor of ~1024 against the
// card's units): the legacy pods' requests and IDs count that unit.
//
// # Container environment
//
//	NVIDIA_VISIBLE_DEVICES            the cards' UUIDs, comma-separated, with
//	                                  --device-list-strategy envvar (below)
//	ALIYUN_COM_GPU_MEM_IDX            the cards' indexes, comma-separated
//	ALIYUN_COM_GPU_MEM_CONTAINER      the container's units (all its cards)
//	ALIYUN_COM_GPU_MEM_POD            the pod's units (Allocation.Total)
//	ALIYUN_COM_GPU_MEM_DEV            the first card's memory in units
//	CUDA_MPS_PINNED_DEVICE_MEM_LIMIT  "0=8G" (GiB) or "0=8192M" (MiB), one entry
//	                                  per visible card ("0=8192M" in mps mode)
//	GPUSHARE_ISOLATION                driver, mps or none (below)
//	GPUSHARE_MEMORY_LIMIT_MIB         the share in MiB per card
//	GPUSHARE_MEMORY_FRACTION          the share as a fraction of each card
//
// The device list strategy says how the runtime learns the cards:
//
//	envvar           NVIDIA_VISIBLE_DEVICES=<UUID>,...
//	volume-mounts    /dev/null mounted read-only at
//	                 /var/run/nvidia-container-devices/<UUID> per card;
//	                 NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices
//	cdi-annotations  annotation cdi.k8s.io/gpushare_gpu-mem=nvidia.com/gpu=<UUID>,...;
//	                 NVIDIA_VISIBLE_DEVICES=void
//	cdi-cri          CDI devices nvidia.com/gpu=<UUID> in the response, which
//	                 kubelet passes in the CRI request; NVIDIA_VISIBLE_DEVICES=void
//
// A pod's own env wins over the plugin's, so with envvar a pod that sets
// NVIDIA_VISIBLE_DEVICES=all sees every GPU. The NVIDIA container toolkit
// stops that with accept-nvidia-visible-devices-envvar-when-unprivileged =
// false and reads the cards from the mounts with
// accept-nvidia-visible-devices-as-volume-mounts = true; volume-mounts,
// cdi-cri and cdi-annotations keep working under those settings. envvar stays the default: it
// is the only strategy that works on a stock toolkit, and the others fail
// on nodes not set up for them (toolkit settings, CDI spec, CDI-enabled
// runtime). None of them limits memory; --isolation does (below).
// docs/reference/device-plugin.md ("Hardened nodes") has the hardened setup
// and its sources.
//
// # Memory isolation
//
// At startup Run detects what the node supports and gives each card a mode
// for --isolation (package isolation): driver (driver R615+, cgroup v2, MIG
// off: the response carries a CDI device of the plugin's own spec whose
// hook applies NVIDIA_GPU_MEMORY_LIMIT to the container's cgroup), mps (an
// MPS daemon per card; the response mounts its pipe and log directories and
// sets the client's CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) or none (advisory:
// nothing limits a process to its share). auto, the default, takes the
// strongest per card; an explicit mode some card cannot enforce is a
// startup error. The mode is logged per card, published per card in the
// inventory, and set in every container as GPUSHARE_ISOLATION, with the
// share as GPUSHARE_MEMORY_LIMIT_MIB and GPUSHARE_MEMORY_FRACTION.
package deviceplugin
