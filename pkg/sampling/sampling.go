package sampling

// kube-scheduler's bounds on sampling: minFeasibleNodesToFind and
// minFeasibleNodesPercentageToFind in pkg/scheduler/schedule_one.go, the
// same in v1.34 and v1.37.
const (
	// MinNodesToFind: kube-scheduler looks for at least this many nodes, and
	// for every node below it.
	MinNodesToFind      = 100
	minAdaptivePercent  = 5
	adaptiveBasePercent = 50
	// adaptiveNodesPerPercent: the adaptive percentage drops by 1 per this
	// many nodes.
	adaptiveNodesPerPercent = 125
)

// NodesToFind returns how many nodes that pass its own filters
// kube-scheduler looks for before it stops filtering and hands them to the
// extender (numFeasibleNodesToFind). In clusters under 100 nodes that is
// every node. Otherwise it is percentage of the nodes, and at least 100.
// Percentage 0 (unset) is adaptive: 50% less 1% per 125 nodes, but at
// least 5%. Examples: 1,213 nodes, percentage 0: 50 − 1213/125 = 41%, so
// 497 nodes. 5,000 nodes: 10%, so 500. Percentage 100: every node.
func NodesToFind(percentage int32, nodes int) int {
	if nodes < MinNodesToFind {
		return nodes
	}
	p := int(percentage)
	if p == 0 {
		p = max(adaptiveBasePercent-nodes/adaptiveNodesPerPercent, minAdaptivePercent)
	}
	return max(nodes*p/100, MinNodesToFind)
}

// MayHaveStopped reports whether kube-scheduler may have stopped filtering
// early when it sent the extender sent nodes of a cluster of nodes. It
// sends fewer than NodesToFind only when no more passed its filters. Its
// count of the cluster's nodes may differ from the caller's by a node or
// two, as informers lag each other. That moves NodesToFind by at most one
// per two nodes, so a count within that slack below it counts as stopped.
func MayHaveStopped(percentage int32, nodes, sent int) bool {
	const slack = 2
	return sent >= MinNodesToFind && sent+slack >= NodesToFind(percentage, nodes)
}
