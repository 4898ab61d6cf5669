// Package cache holds the extender's view of every GPU node's cards and of
// the pods holding memory on them.
//
// Client-go informers and the extender's own bind decisions feed it. One
// Cache owns all state behind one mutex; informer and HTTP handlers only
// call its methods. A writer holds the mutex for microseconds. Before it
// releases it, it publishes an immutable copy of each node it changed and
// of the policy's inputs. Filter, FilterBest, Score and ScoreCPU read only
// those copies and take no lock, so searches and writes never wait for each
// other. Assume searches a copy too, and holds its choice only if the node
// did not change meanwhile. Each request's searches share one step budget
// (allocator.Budget).
//
// A pod's allocation moves through these states, keyed by pod UID:
//
//	                Assume (bind chose cards)
//	(absent) ────────────────────────────────► assumed ──Forget (no Binding made)──► (absent)
//	   │                                         │  │
//	   │                                         │  └──deadline passed, pod still unbound
//	   │                          FinishBinding  │     (bind never completed, or its answer
//	   │                         (Binding made)  │     was lost and the API never showed it)
//	   │                                         ▼                  ──Expire──► (absent)
//	   │                                  bound, unconfirmed ──deadline passed──► (absent)
//	   │                                         │            (never delivered: created, bound
//	   │           pod event shows it bound      │ pod event   and deleted in one watch gap)
//	   └──────────────────────────────────► bound, confirmed ◄┘ shows it bound
//	                                             │
//	          pod deleted, Succeeded or Failed   ▼
//	          (or re-created: a UID change)   (absent)
//
// While an assumption stands, Assume refuses the same pod on another node
// (ErrBindInFlight), because its Binding may still be made. Filter and
// FilterBest send the pod back to the assumption's node instead, when
// kube-scheduler offers it. A bind there re-sends the Binding with the same
// cards, which settles an unknown outcome at once rather than AssumeTTL
// later. For AssumeTTL after the informer delivers a pod's delete, Assume
// refuses the pod (ErrPodGone). A bind that read the pod just before the
// delete would otherwise hold cards that no later event releases.
//
// A bound pod is charged only one of two trusted allocations. The first is
// ours (Assume). The second is its gpushare.io/allocation annotation, when
// it fits the pod's request container by container and the node's cards
// (each card's UUID and size, in the node's unit after conversion). Anyone
// who can create a pod can write the annotation. Our Binding writes it
// together with the node, so a pending pod's annotation is never ours and
// holds nothing. A bound pod whose annotation fails the checks, or that has
// none (another scheduler placed it), is charged its request on the card
// ALIYUN_COM_GPU_MEM_IDX names; without one it is recorded as
// unattributed. Config.OnIgnored (the extender logs it) and Inspect report
// the ignored annotations. A bound pod is resolved again whenever its
// node's cards change. A restarted extender rebuilds the same state from
// the informers' initial list.
//
// A replica that just became leader catches up before it places pods
// (pkg/leader). feed.Feeder.CatchUp reads every bound, unfinished pod with a
// quorum list and applies it with ApplyQuorum, as an informer event would.
// Each listed pod's resourceVersion becomes its floor: a lagging watch's
// older events of the pod are dropped until the informer reaches it.
// CatchUp says how overlapping catch-ups resolve.
//
// A new pod may use the cards that allocator.Exclude allows for its card
// annotations (PodInfo.Constraints, parsed once) and that are not cordoned
// (gpushare.io/cordoned-gpus, read by SetNode). An invalid cordon value
// cordons every card of the node. A pod with invalid card annotations fits
// nowhere. The trust check of bound pods ignores both, so a pod stays
// charged on its card when the card is cordoned after it landed.
//
// Every card's Used is the sum of what the cache's pods hold on it
// (gpushare.Allocation.PerCard), kept up as pods come and go. A node update
// that changes its inventory annotation, capacity or allocatable rebuilds
// its cards and re-applies its pods; pkg/feed drops the other updates, such
// as heartbeats. Each such change takes the node out of the cluster's
// allocator.Holes and puts it back, so that count never scans all nodes.
//
// The cache also keeps each node's allocatable CPU and memory, and what is
// requested there: by every bound, unfinished pod, GPU or not, and by every
// assumed allocation (PodRequests, as kube-scheduler's NodeResourcesFit
// counts). Score hands them to the policies that weigh CPU and memory too
// (allocator.HostScorer), so the extender ranks nodes as the simulator
// does. The cache never filters on CPU or memory; kube-scheduler does.
//
// Preemption (preempt.go, docs/design/preemption.md): PlanPreemption finds
// the lower-priority pods of one card whose eviction lets a pending pod
// fit. Reserve holds the room they leave under the pod's own UID, in a
// third state beside assumed and bound:
//
//	(absent) ──Reserve──► reserved ──Assume of the pod (any node)──► assumed
//	                         │
//	                         └──Release, the pod deleted or bound by another,
//	                            or the deadline (ttl + the victims' grace)──► (absent)
//
// Reserved room is charged to the cards, and its CPU and memory to the
// node, for every pod but its own. That pod sees it as free (its credit),
// so it fits there once its victims have gone, and nobody else fits in
// their place meanwhile.
package cache
