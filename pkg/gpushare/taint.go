package gpushare

// TaintIdleGPUs is the key of the taint (effect PreferNoSchedule, no value)
// the device plugin keeps on a node of at least DefaultIdleTaintMinCards
// cards while none of them holds any pod's GPU memory. A pod that does not
// tolerate it (none does by default) scores lower there in every
// kube-scheduler's TaintToleration (weight 3 in its default profile), so
// pods that ask no GPU memory, placed by the cluster's own scheduler
// whatever the topology, prefer nodes whose cards are in use and leave
// whole idle multi-card nodes to the pods that need several cards. Nothing
// of gpushare is in those pods' path: the taint is a field of the Node,
// kept up to date beside the scheduling.
const TaintIdleGPUs = "gpushare.io/idle-gpus"

// DefaultIdleTaintMinCards is the fewest cards a node needs to be tainted
// idle: measured with `simulate` (docs/design/policies.md), nodes of 4 or
// more cards, where multi-card pods need whole idle nodes; tainting 2-card
// nodes too sent pods without GPU memory onto nodes with busy cards and
// little CPU (95.50% of GPU memory allocated at 100% arrival on the
// default openb trace against 96.15%, seeds 42-44, extender topology).
const DefaultIdleTaintMinCards = 4

// WantsIdleTaint reports whether a node of cards cards carries
// TaintIdleGPUs when idle says whether none of them holds GPU memory:
// minCards is the threshold, 0 (never) turning the taint off.
func WantsIdleTaint(cards, minCards int, idle bool) bool {
	return minCards > 0 && cards >= minCards && idle
}
