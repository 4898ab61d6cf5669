// Package cache holds the extender's view of every GPU node's cards and of
// the pods holding memory on them, fed by client-go informers and by the
// extender's own bind decisions.
//
// One Cache object owns all state behind one mutex; informer handlers and
// HTTP handlers only call its methods. A pod's allocation moves through
// these states (keyed by pod UID):
//
//	               Assume (bind chose cards)
//	(absent) ───────────────────────────────► assumed ──Forget (bind failed)──► (absent)
//	   │                                        │  │
//	   │                                        │  └──deadline passed, pod still
//	   │                         FinishBinding  │     unbound (extender died
//	   │                        (Binding made)  │     mid-bind) ──Expire──► (absent)
//	   │                                        ▼
//	   │   pod event: annotation + nodeName   bound ◄─┐
//	   └──────────────────────────────────────────────┘ pod event confirms it
//	                                            │
//	         pod deleted, Succeeded or Failed   ▼
//	                                         (absent)
//
// A restarted extender rebuilds the same state from the informers' initial
// list: a pod with the allocation annotation and spec.nodeName is bound; one
// with the annotation but no node yet (our Binding writes both at once, so
// only an older extender or another writer leaves one) is assumed with a
// fresh deadline (its bind may still be under way); pods that ask gpu-mem
// on a node without our annotation (bound by another scheduler) are charged
// to the card named by ALIYUN_COM_GPU_MEM_IDX when present, otherwise
// recorded as unattributed and shown by Inspect.
//
// Every card's Used is the sum of what the pods in the cache hold on it
// (gpushare.Allocation.PerCard), maintained as pods come and go; a node
// update that changes its inventory annotation, capacity or allocatable
// rebuilds its cards and re-applies its pods (the Feeder drops the others,
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
package cache
