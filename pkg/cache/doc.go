// Package cache holds the extender's view of every GPU node's cards and of
// the pods holding memory on them, fed by client-go informers and by the
// extender's own bind decisions.
//
// One Cache object owns all state behind one mutex; informer handlers and
// HTTP handlers only call its methods. Writers (informer events, a bind's
// Assume, Forget, Expire) hold the mutex for microseconds and, before they
// release it, publish an immutable copy of each node they changed and of
// the policy's inputs (typical requests, holes, CPU demand). Filter,
// FilterBest, Score and ScoreCPU read only those copies and take no lock,
// so they never wait behind a write, and a slow search never delays one;
// Assume searches a node's copy without the lock and holds its choice only
// if the node did not change meanwhile. Each request's searches share one
// step budget and end with its context (allocator.Budget). A pod's allocation moves through
// these states (keyed by pod UID):
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
// (ErrBindInFlight): its Binding may still be made. Filter and FilterBest
// send the pod back to the assumption's node instead (when kube-scheduler
// offers it): a bind there re-sends the Binding with the same cards, which
// settles an outcome left unknown at once rather than AssumeTTL later.
// Assume refuses a pod whose delete the informer has delivered (for
// AssumeTTL after it, ErrPodGone): a bind that read the pod just before
// the delete would otherwise hold cards that no later event releases.
//
// What a bound pod is charged: only two kinds of allocation are trusted.
// Ours (Assume) and a bound pod's gpushare.io/allocation annotation that
// fits the pod's request container by container and the node's cards (the
// card's UUID and size; an allocation in another unit is converted to the
// node's). Anyone who can create a pod can write the annotation, and our
// Binding writes it together with the node, so a pending pod's annotation
// is never ours: it holds nothing. A bound pod whose annotation fails the
// checks, or that has none (placed by another scheduler), is charged its
// request on the card ALIYUN_COM_GPU_MEM_IDX names when present, otherwise
// recorded as unattributed. Ignored annotations are reported through
// Config.OnIgnored (the extender logs them) and listed by Inspect. A
// bound pod is resolved again whenever its node's cards change.
//
// A restarted extender rebuilds the same state from the informers' initial
// list.
//
// Catch-up (a replica that just became leader, pkg/leader): feed.Feeder.CatchUp
// reads every bound, unfinished pod with a quorum list and applies it
// (ApplyQuorum) as an informer event would, except where an informer event
// applied during the catch-up is newer (or a delete). Each listed pod's
// resourceVersion becomes its floor: informer events of the pod older than
// it, which a lagging watch still delivers (the pod pending, its card
// free), are dropped until the informer reaches it. resourceVersions of one
// pod are compared as integers (etcd's revisions); a non-integer one
// disables the floor for that event. Catch-ups may overlap (a lease flap
// begins a new term's while the old one's list is still being applied):
// BeginCatchUp returns a handle, only the latest catch-up applies pods and
// records informer events, and an older one's end leaves the latest's
// record in place.
//
// Which cards a new pod may use is allocator.Exclude's answer for the pod's
// card annotations (PodInfo.Constraints, parsed once when the pod arrives)
// and each card's cordon (the node's gpushare.io/cordoned-gpus, read by
// SetNode; an invalid value cordons every card of the node). Filter,
// FilterBest, Score and Assume place pods only there, and a pod with invalid
// card annotations fits nowhere. The trust check of bound pods ignores
// both: a pod keeps being charged on the card it runs on when the card is
// cordoned after it landed.
//
// Every card's Used is the sum of what the pods in the cache hold on it
// (gpushare.Allocation.PerCard), maintained as pods come and go; a node
// update that changes its inventory annotation, capacity or allocatable
// rebuilds its cards and re-applies its pods (pkg/feed drops the others,
// such as heartbeats). Every such change also takes the node out of the
// cluster's allocator.Holes (partly used cards counted by free memory,
// which the default policy's waste model reads) and puts it back, so the
// count never needs a scan of all nodes.
//
// Beside the cards, the cache keeps each node's allocatable CPU and memory
// and the CPU and memory requested on it (PodRequests, as kube-scheduler's
// NodeResourcesFit counts them) by every pod bound to it and not finished,
// GPU or not, and by every assumed allocation (released with it). Score
// gives them to the policies that weigh CPU and memory too
// (allocator.HostScorer), so the extender ranks nodes exactly as the
// simulator does. The cache never filters on CPU or memory: kube-scheduler
// does.
//
// Preemption (preempt.go, docs/design/preemption.md): PlanPreemption finds
// the lower-priority pods of one card whose eviction lets a pending pod
// fit, and Reserve holds the room they leave for that pod under the pod's
// own UID, in a third state beside assumed and bound:
//
//	(absent) ──Reserve──► reserved ──Assume of the pod (any node)──► assumed
//	                         │
//	                         └──Release, the pod deleted or bound by another,
//	                            or the deadline (ttl + the victims' grace)──► (absent)
//
// Reserved room is charged to the cards, and its CPU and memory to the
// node, for every pod but its own: that pod's Filter, FilterBest, Score and
// Assume see it as free (its credit), so the pod fits there once its
// victims have gone, and nobody else fits in their place meanwhile.
package cache
