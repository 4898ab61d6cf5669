package simulator

import (
	"slices"
	"strings"

	"github.com/gpushare/gpushare/pkg/sampling"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// DefaultPercentageOfNodesToScore is the percentageOfNodesToScore that
// config/kube-scheduler-config.yaml ships, and so what a replay follows
// unless told otherwise: 0, kube-scheduler's adaptive default (see
// sampling.NodesToFind). Measured on the openb trace at 1,213 and 5,000 nodes, it
// allocates 0.03 to 0.05 points of GPU capacity less than 100 (every node)
// while kube-scheduler schedules 1.5 (1,000 nodes) to 4 (5,000 nodes)
// times as many pods per second; docs/design/policies.md ("kube-scheduler's
// node sampling") has the numbers. TestShippedPercentageOfNodesToScore keeps the two in step.
const DefaultPercentageOfNodesToScore int32 = 0

// sampler walks the nodes as kube-scheduler v1.34 does in one scheduling
// cycle (findNodesThatPassFilters): from the start index on, around the
// ring of nodes in its order, until toFind nodes passed its own filters or
// every node was examined; the next cycle starts after the last node
// examined (nextStartNodeIndex advances by the nodes that passed plus those
// that failed). kube-scheduler checks nodes on 16 goroutines, chunk by
// chunk, so which nodes make the sample and how far the index moves vary a
// little with timing; the sampler examines them one by one.
type sampler struct {
	// order holds indexes of replay.nodes in kube-scheduler's order (see
	// schedulerOrder).
	order []int
	// toFind is NodesToFind for the cluster.
	toFind int
	// next is the position in order where the next cycle starts.
	next int
	// sample is reused between cycles.
	sample []int
}

func newSampler(nodes []trace.Node, percentage int32) sampler {
	return sampler{order: schedulerOrder(nodes), toFind: sampling.NodesToFind(percentage, len(nodes))}
}

// cycle returns the first toFind nodes from the start index on that pass
// feasible, with the number of nodes it examined (passed or not), and
// moves the start index on by that number. The slice is reused by the
// next call.
func (s *sampler) cycle(feasible func(node int) bool) (sample []int, examined int) {
	n := len(s.order)
	s.sample = s.sample[:0]
	for examined < n && len(s.sample) < s.toFind {
		i := s.order[(s.next+examined)%n]
		examined++
		if feasible(i) {
			s.sample = append(s.sample, i)
		}
	}
	if n > 0 {
		s.next = (s.next + examined) % n
	}
	return s.sample, examined
}

// schedulerOrder returns the indexes of nodes in the order of
// kube-scheduler's node snapshot: its node tree lists the zones in the
// order it first saw them and takes one node of each zone in turn, each
// zone's nodes in the order they were added. A scheduler started on an
// existing cluster adds them in the order of its first list, by name.
// Openb nodes have no zone.
func schedulerOrder(nodes []trace.Node) []int {
	byName := make([]int, len(nodes))
	for i := range byName {
		byName[i] = i
	}
	slices.SortStableFunc(byName, func(a, b int) int { return strings.Compare(nodes[a].Name, nodes[b].Name) })
	var zones []string
	inZone := map[string][]int{} // zone key -> node indexes by name
	for _, i := range byName {
		z := nodes[i].Zone
		if _, ok := inZone[z]; !ok {
			zones = append(zones, z)
		}
		inZone[z] = append(inZone[z], i)
	}
	order := make([]int, 0, len(nodes))
	for k := 0; len(order) < len(nodes); k++ {
		for _, z := range zones {
			if k < len(inZone[z]) {
				order = append(order, inZone[z][k])
			}
		}
	}
	return order
}
