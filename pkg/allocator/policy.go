package allocator

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// Policy orders cards for a slice and rates a node after a placement.
type Policy interface {
	// Name is the flag and annotation value, e.g. "binpack".
	Name() string
	// CardKey ranks card c, which has free units free, for a slice of
	// units (units ≤ free). Lower is tried first.
	CardKey(c *Card, free, units int64) float64
	// NodeScore rates node n once pl is placed on it. Higher is better.
	// Scores are compared only among the nodes of one request.
	NodeScore(n *Node, pl *Placement) float64
}

// Policy names.
const (
	NameBinpack   = "binpack"
	NameSpread    = "spread"
	NameFragAware = "fragaware"
	NameBestFit   = "bestfit"
	NameRandom    = "random"
	NameFGD       = "fgd"
)

// DefaultPolicy is the policy used when none is configured.
const DefaultPolicy = NameFragAware

// PolicyNames lists the policies New accepts.
func PolicyNames() []string {
	return []string{NameBestFit, NameBinpack, NameFGD, NameFragAware, NameRandom, NameSpread}
}

// New returns the named policy. FragAware uses typical, the cluster's
// typical requests (see workload.Workload.Typical), and holes, the cluster's
// partly used cards, nil when unknown (see NewFragAware). FGD takes typical
// as its target workload. The simulator instead builds FGD with NewFGD from
// the whole trace, as the study does. Other policies ignore both. Random
// draws from a generator seeded by the clock; the simulator seeds it with
// NewRandom.
func New(name string, typical []Shape, holes *Holes) (Policy, error) {
	switch name {
	case NameBinpack:
		return Binpack{}, nil
	case NameSpread:
		return Spread{}, nil
	case NameFragAware:
		return NewFragAware(typical, holes), nil
	case NameBestFit:
		return BestFit{}, nil
	case NameRandom:
		return NewRandom(nil), nil
	case NameFGD:
		tasks := make([]Task, len(typical))
		for i, s := range typical {
			tasks[i] = Task{Units: s.Units, Cards: s.Cards, MilliCPU: int64(math.Ceil(s.MilliCPU)), Weight: s.Weight}
		}
		return NewFGD(tasks), nil
	}
	return nil, fmt.Errorf("unknown policy %q; want one of %s", name, strings.Join(PolicyNames(), ", "))
}

// utilisationAfter is the share of the node's healthy capacity in use once
// pl is placed, in [0, 1].
func utilisationAfter(n *Node, pl *Placement) float64 {
	var used, total int64
	for i := range n.Cards {
		c := &n.Cards[i]
		if !c.Healthy {
			continue
		}
		total += c.Total
		used += min(c.Total, c.Used+pl.Reserved[i])
	}
	if total == 0 {
		return 0
	}
	return float64(used) / float64(total)
}

// Binpack is best fit. It takes the card left with the least free memory,
// and the node left the fullest.
type Binpack struct{}

func (Binpack) Name() string { return NameBinpack }

func (Binpack) CardKey(_ *Card, free, units int64) float64 { return float64(free - units) }

func (Binpack) NodeScore(n *Node, pl *Placement) float64 { return utilisationAfter(n, pl) }

// Spread is worst fit. It takes the card left with the most free memory,
// and the node left the emptiest.
type Spread struct{}

func (Spread) Name() string { return NameSpread }

func (Spread) CardKey(_ *Card, free, units int64) float64 { return -float64(free - units) }

func (Spread) NodeScore(n *Node, pl *Placement) float64 { return 1 - utilisationAfter(n, pl) }

// MaxScore is the highest score an extender may give (extenderv1.MaxExtenderPriority).
const MaxScore = 10

// MaxBestNodes bounds the nodes the extender's filter passes as best
// (--filter-best). It passes the first ones, in the order kube-scheduler
// sent them, which kube-scheduler rotates from cycle to cycle.
// kube-scheduler's own scores then choose among them. 100 is what
// kube-scheduler itself deems enough to choose among: its minimum of
// feasible nodes to find, however small percentageOfNodesToScore. More
// only lengthens the reply and kube-scheduler's scoring of every node
// passed.
const MaxBestNodes = 100

// NormalizeScores maps raw node scores to 0..MaxScore linearly. The best
// node gets MaxScore and the worst 0. Equal scores all get MaxScore.
// Example: raw [0.2, 0.5, 0.8] → [0, 5, 10].
func NormalizeScores(raw []float64) []int64 {
	out := make([]int64, len(raw))
	if len(raw) == 0 {
		return out
	}
	lo, hi := slices.Min(raw), slices.Max(raw)
	for i, r := range raw {
		out[i] = Normalize(r, lo, hi)
	}
	return out
}

// Normalize maps the raw score r of a node to 0..MaxScore as
// NormalizeScores does among nodes whose raw scores range from lo to hi.
// The map is linear, and gives MaxScore to all when the range is empty.
func Normalize(r, lo, hi float64) int64 {
	if hi-lo < 1e-12 {
		return MaxScore
	}
	return int64(math.Round(MaxScore * (r - lo) / (hi - lo)))
}

// MarkBest maps raw node scores to MaxScore for those equal to the
// highest and 0 for the others. It is the extender's prioritize answer for
// a pod that asks no GPU memory (see CPUScorer). With a weight of 3 or more
// the best nodes gain 3 × 10 × 10 = 300 points. kube-scheduler's
// NodeResourcesFit and NodeResourcesBalancedAllocation give at most 200.
// So kube-scheduler takes one of the best nodes, and its own scores choose
// among them. Example: raw [0, −1000, 0] → [10, 0, 10].
func MarkBest(raw []float64) []int64 {
	out := make([]int64, len(raw))
	if len(raw) == 0 {
		return out
	}
	hi := slices.Max(raw)
	for i, r := range raw {
		if r == hi {
			out[i] = MaxScore
		}
	}
	return out
}
