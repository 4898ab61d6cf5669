package allocator

import (
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Random is the study's random baseline. It takes any node where the pod
// fits and any card on it, uniformly. Its scores come from its own
// generator, so it is reproducible when built with NewRandom and a seeded
// generator. It is not safe for concurrent use; the extender builds one per
// request.
type Random struct {
	rng *rand.Rand
}

// NewRandom returns a Random drawing from rng. A nil rng is seeded from the
// clock.
func NewRandom(rng *rand.Rand) *Random {
	if rng == nil {
		seed := uint64(time.Now().UnixNano())
		rng = rand.New(rand.NewPCG(seed, randomSeq.Add(1)))
	}
	return &Random{rng: rng}
}

// randomSeq tells apart generators seeded in the same nanosecond.
var randomSeq atomic.Uint64

func (*Random) Name() string { return NameRandom }

// CardKey is a uniform draw: every card that fits is equally likely first.
func (r *Random) CardKey(*Card, int64, int64) float64 { return r.rng.Float64() }

// NodeScore is a uniform draw: every node that fits is equally likely best.
func (r *Random) NodeScore(*Node, *Placement) float64 { return r.rng.Float64() }
