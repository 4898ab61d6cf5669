package simulator

import (
	"fmt"
	"strings"

	"github.com/gpushare/gpushare/pkg/allocator"
)

// DRA replays pods that ask GPU memory through Dynamic Resource Allocation
// (the DRA driver, module dra): kube-scheduler's DRA plugin gives a claim
// the first device with room in the order of the node's ResourceSlice
// (first fit; DRA does not score devices), so the card is the first one, in
// Order, whose free memory fits the claim; a pod of k whole cards takes
// the first k free ones. Which node takes the pod is NodeChoice's.
// dra/test/simulator checks the card choice against DRA's own allocator
// (k8s.io/dynamic-resource-allocation/structured v0.37).
type DRA struct {
	// Order is the order of each node's devices in its slice.
	Order DRAOrder
	// NodeChoice says who rates the nodes where the claim fits.
	NodeChoice DRANodeChoice
}

// DRAOrder is the order of a node's devices in its ResourceSlice.
type DRAOrder string

// Orders of the devices: the DRA driver's --device-order, and one it does
// not have.
const (
	// DRAOrderIndex lists cards by index (the driver's default).
	DRAOrderIndex DRAOrder = "index"
	// DRAOrderSmallestFirst lists the cards with the least memory first,
	// ties by index.
	DRAOrderSmallestFirst DRAOrder = "smallest-first"
	// DRAOrderLargestFirst lists the cards with the most memory first.
	DRAOrderLargestFirst DRAOrder = "largest-first"
	// DRAOrderFullestFirst lists the cards with the least free memory
	// first: a slice the driver would republish after every allocation
	// (it does not; this measures what that would buy).
	DRAOrderFullestFirst DRAOrder = "fullest-first"
)

// DRAOrders lists the orders.
var DRAOrders = []DRAOrder{DRAOrderIndex, DRAOrderSmallestFirst, DRAOrderLargestFirst, DRAOrderFullestFirst}

// DRANodeChoice says who rates the nodes where a claim fits.
type DRANodeChoice string

// Node choices.
const (
	// DRANodeExtender: the extender's policy rates each node by the card
	// DRA will take there (its prioritize and filter, as for
	// aliyun.com/gpu-mem pods), and kube-scheduler adds its own scores.
	DRANodeExtender DRANodeChoice = "extender"
	// DRANodeScheduler: kube-scheduler's own scores alone (no extender).
	DRANodeScheduler DRANodeChoice = "scheduler"
)

// ParseDRA reads "ORDER" or "ORDER/CHOICE" (choice default extender), e.g.
// "smallest-first/scheduler".
func ParseDRA(s string) (*DRA, error) {
	order, choice, _ := strings.Cut(s, "/")
	d := &DRA{Order: DRAOrder(order), NodeChoice: DRANodeChoice(choice)}
	if d.NodeChoice == "" {
		d.NodeChoice = DRANodeExtender
	}
	okOrder := false
	for _, o := range DRAOrders {
		okOrder = okOrder || o == d.Order
	}
	if !okOrder || (d.NodeChoice != DRANodeExtender && d.NodeChoice != DRANodeScheduler) {
		return nil, fmt.Errorf("DRA replay %q: want ORDER[/CHOICE], ORDER one of index, smallest-first, largest-first, fullest-first, CHOICE extender or scheduler", s)
	}
	return d, nil
}

// String is the ParseDRA form.
func (d *DRA) String() string { return string(d.Order) + "/" + string(d.NodeChoice) }

// draPolicy is the policy of a DRA replay: cards in the order DRA tries
// them (CardKey), nodes rated by inner on the placement DRA makes, or not
// at all (DRANodeScheduler).
type draPolicy struct {
	inner allocator.Policy
	dra   *DRA
}

var (
	_ allocator.HostScorer = draPolicy{}
	_ allocator.CPUScorer  = draPolicy{}
)

// DRAPolicy is inner as a DRA replay d runs it: cards in the order DRA
// tries them (CardKey), nodes rated by inner on the placement DRA makes
// there, or not at all (DRANodeScheduler). dra/test/simulator checks its
// card choice against DRA's own allocator.
func DRAPolicy(inner allocator.Policy, d *DRA) allocator.Policy {
	return draPolicy{inner: inner, dra: d}
}

// withDRA returns policy as a DRA replay runs it: policy itself without
// Options.DRA.
func (r *replay) withDRA(policy allocator.Policy) allocator.Policy {
	if r.opts.DRA == nil {
		return policy
	}
	return DRAPolicy(policy, r.opts.DRA)
}

func (p draPolicy) Name() string { return p.inner.Name() + "+dra-" + p.dra.String() }

// CardKey is the card's place in the slice: lower keys are tried first,
// and allocator.FitWith takes the first card that fits (ties by position,
// which is index order).
func (p draPolicy) CardKey(c *allocator.Card, free, _ int64) float64 {
	switch p.dra.Order {
	case DRAOrderSmallestFirst:
		return float64(c.Total)
	case DRAOrderLargestFirst:
		return -float64(c.Total)
	case DRAOrderFullestFirst:
		return float64(free)
	}
	return float64(c.Index)
}

func (p draPolicy) NodeScore(n *allocator.Node, pl *allocator.Placement) float64 {
	if p.dra.NodeChoice == DRANodeScheduler {
		return 0
	}
	return p.inner.NodeScore(n, pl)
}

func (p draPolicy) NodeScoreHost(n *allocator.Node, pl *allocator.Placement, h *allocator.Host) float64 {
	if p.dra.NodeChoice == DRANodeScheduler {
		return 0
	}
	if hs, ok := p.inner.(allocator.HostScorer); ok {
		return hs.NodeScoreHost(n, pl, h)
	}
	return p.inner.NodeScore(n, pl)
}

func (p draPolicy) NodeScoreCPU(n *allocator.Node, h *allocator.Host) float64 {
	if cs, ok := p.inner.(allocator.CPUScorer); ok && p.dra.NodeChoice == DRANodeExtender {
		return cs.NodeScoreCPU(n, h)
	}
	return 0
}

// draSuffix separates a policy from its DRA replay in a --policy entry.
const draSuffix = "@dra:"

// SplitDRAPolicy reads a --policy entry: a policy name, or one with a DRA
// replay, POLICY@dra:ORDER[/CHOICE] (ParseDRA), e.g.
// "fragaware@dra:index/extender": the GPU pods as DRA claims, devices in
// index order, nodes rated by fragaware on the card DRA takes. d is nil
// for a plain name.
func SplitDRAPolicy(entry string) (policy string, d *DRA, err error) {
	policy, spec, ok := strings.Cut(entry, draSuffix)
	if !ok {
		return entry, nil, nil
	}
	d, err = ParseDRA(spec)
	return policy, d, err
}

// splitDRA moves a DRA replay named in o.Policy (SplitDRAPolicy) to o.DRA.
func (o *Options) splitDRA() error {
	policy, d, err := SplitDRAPolicy(o.Policy)
	if err != nil {
		return err
	}
	if d != nil {
		o.Policy, o.DRA = policy, d
	}
	return nil
}

// schedulerAlone reports whether no extender filters the GPU pods (a DRA
// replay whose nodes kube-scheduler alone rates): every node of the sample
// where the claim fits is a candidate, not the extender's first
// allocator.MaxBestNodes.
func (r *replay) schedulerAlone() bool {
	return r.opts.DRA != nil && r.opts.DRA.NodeChoice == DRANodeScheduler
}
