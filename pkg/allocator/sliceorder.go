package allocator

// SliceOrder is inner as it places a pod whose GPU memory comes through a
// claim of the gpushare DRA driver. kube-scheduler's DRA plugin gives the
// claim the first card whose free memory fits, in the order of the node's
// ResourceSlice (Card.Rank). It is first fit, as DRA does not score
// devices. So CardKey is the card's Rank. inner rates the node on the card
// DRA will take there: NodeScore, and NodeScoreHost when inner weighs CPU
// too. The simulator's DRA replay (fragaware@dra) places pods the same
// way.
func SliceOrder(inner Policy) Policy {
	if hs, ok := inner.(HostScorer); ok {
		return sliceOrderHost{sliceOrder{inner}, hs}
	}
	return sliceOrder{inner}
}

type sliceOrder struct{ inner Policy }

type sliceOrderHost struct {
	sliceOrder
	hs HostScorer
}

var (
	_ Policy     = sliceOrder{}
	_ HostScorer = sliceOrderHost{}
)

func (p sliceOrder) Name() string { return p.inner.Name() }

// CardKey is the card's place in the slice. FitWith takes the first card
// of the lowest key that fits.
func (sliceOrder) CardKey(c *Card, _, _ int64) float64 { return float64(c.Rank) }

func (p sliceOrder) NodeScore(n *Node, pl *Placement) float64 { return p.inner.NodeScore(n, pl) }

func (p sliceOrderHost) NodeScoreHost(n *Node, pl *Placement, h *Host) float64 {
	return p.hs.NodeScoreHost(n, pl, h)
}
