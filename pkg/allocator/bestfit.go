package allocator

// BestFit is the best-fit baseline of the FGD study (Weng et al., USENIX
// ATC '23). Its card rule is also that of Aliyun's gpushare extender. It
// takes the card left with the least free memory, and the node left with
// the least free resources. Binpack compares nodes by the share of their
// GPU memory in use. BestFit compares the amounts left instead. So a small
// node that the pod nearly fills beats a big node that it fills to the same
// share.
//
// With a Host, as in the simulator, the node's leftover is weighed as in
// the study. It is ½·CPU left/largest node's CPU + ½·GPU left/largest
// node's GPU, and lower is better. Example: the largest node has 96 cores
// and 8000 units. A node left with 24 cores and 500 units scores
// −(½·24/96 + ½·500/8000) = −0.156. One left with 8 cores and 1500 units
// scores −0.135 and wins.
type BestFit struct{}

func (BestFit) Name() string { return NameBestFit }

func (BestFit) CardKey(_ *Card, free, units int64) float64 { return float64(free - units) }

// NodeScore is minus the units left free on n once pl is placed.
func (BestFit) NodeScore(n *Node, pl *Placement) float64 {
	return -float64(freeAfter(n, pl))
}

func (BestFit) NodeScoreHost(n *Node, pl *Placement, h *Host) float64 {
	var s float64
	if h.MaxMilliCPU > 0 {
		s += 0.5 * float64(h.FreeMilliCPU-h.PodMilliCPU) / float64(h.MaxMilliCPU)
	}
	if h.MaxUnits > 0 {
		s += 0.5 * float64(freeAfter(n, pl)) / float64(h.MaxUnits)
	}
	return -s
}

// freeAfter is the units free on n's healthy cards once pl is placed.
func freeAfter(n *Node, pl *Placement) int64 {
	var free int64
	for i := range n.Cards {
		free += max(0, n.Cards[i].Free()-pl.Reserved[i])
	}
	return free
}

var _ HostScorer = BestFit{}
