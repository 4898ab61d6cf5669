package allocator

import (
	"math"
	"sort"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Shape is a typical request: Units on each of Cards cards, with its share
// of recent requests.
type Shape struct {
	Units int64
	Cards int
	// Weight is the share of recent requests of this shape; the weights of
	// Workload.Typical sum to 1.
	Weight float64
	// MilliCPU is the mean CPU, in millicores, that requests of this shape
	// asked per container; 0 when no caller reported CPU (see ObserveCPU).
	MilliCPU float64
	// MemoryMiB likewise, in MiB.
	MemoryMiB float64
}

// FragAware scores by the change in fragmentation (see Fragmentation): the
// node whose fragmentation grows least (or shrinks most) wins; among equal
// nodes, the fuller one (as Binpack) wins.
//
// Worked example, typical requests 50% × 8 GiB and 50% × 4 GiB, a 4 GiB pod,
// two 16 GiB cards: A with 6 GiB free, B with 16 GiB free.
//
//	A: before, 6 free is fragment for the 8 GiB shape: 0.5×6 = 3.
//	   after, 2 free is fragment for both: 0.5×2 + 0.5×2 = 2.   Δ = −1
//	B: before, 16 free serves both shapes: 0.
//	   after, 12 free serves both: 0.                           Δ =  0
//
// A is chosen: it turns 6 GiB that 8 GiB pods could not use into a placed
// pod. Best fit would also pick A here; with free 9 on A and 12 on B, best fit
// picks A (leaving 5: 0.5×5 = 2.5 fragment) while FragAware picks B (leaving
// 8: usable by both shapes).
type FragAware struct {
	// typical requests, single-card shapes only, heaviest first.
	single []Shape
	// multi-card shapes.
	multi []Shape
}

// NewFragAware returns the policy for the given typical requests. With none
// (no pod seen yet), it behaves as Binpack.
func NewFragAware(typical []Shape) *FragAware {
	f := &FragAware{}
	for _, s := range typical {
		if s.Cards <= 1 {
			f.single = append(f.single, s)
		} else {
			f.multi = append(f.multi, s)
		}
	}
	return f
}

func (*FragAware) Name() string { return NameFragAware }

// cardFrag is the expected free memory on one card, with free units free,
// that a typical single-card request cannot use.
func (f *FragAware) cardFrag(free int64) float64 {
	var frag float64
	for _, s := range f.single {
		if free < s.Units {
			frag += s.Weight * float64(free)
		}
	}
	return frag
}

// tieWeight makes fragmentation dominate and best fit break ties.
const tieWeight = 1e-6

func (f *FragAware) CardKey(_ *Card, free, units int64) float64 {
	return f.cardFrag(free-units) - f.cardFrag(free) + tieWeight*float64(free-units)
}

// Fragmentation returns the expected free memory on n, in units, that a
// request drawn from the typical shapes could not use, given each card's
// free memory frees (parallel to n.Cards): for a single-card shape, the free
// memory of cards with less free than it asks; for a k-card shape, the
// node's whole free memory when fewer than k cards can take it, else the
// free memory of the cards that cannot.
func (f *FragAware) Fragmentation(frees []int64) float64 {
	var frag float64
	for _, free := range frees {
		frag += f.cardFrag(free)
	}
	for _, s := range f.multi {
		var fits int
		var all, small int64
		for _, free := range frees {
			all += free
			if free >= s.Units {
				fits++
			} else {
				small += free
			}
		}
		if fits < s.Cards {
			frag += s.Weight * float64(all)
		} else {
			frag += s.Weight * float64(small)
		}
	}
	return frag
}

func (f *FragAware) NodeScore(n *Node, pl *Placement) float64 {
	// Single-card shapes: only the cards the pod lands on change.
	var delta float64
	for i, r := range pl.Reserved {
		if r == 0 {
			continue
		}
		before := n.Cards[i].Free()
		delta += f.cardFrag(max(0, before-r)) - f.cardFrag(before)
	}
	if len(f.multi) > 0 {
		var buf [2][16]int64
		before, after := buf[0][:0], buf[1][:0]
		for i := range n.Cards {
			free := n.Cards[i].Free()
			before = append(before, free)
			after = append(after, max(0, free-pl.Reserved[i]))
		}
		m := &FragAware{multi: f.multi}
		delta += m.Fragmentation(after) - m.Fragmentation(before)
	}
	// Scale the tie-breaker to the node so it never outweighs one unit of
	// fragmentation.
	return -delta + tieWeight*utilisationAfter(n, pl)
}

// Workload learns the cluster's typical requests from the pods it sees.
// Each observed container shape gains weight 1 and all weights decay by a
// factor per observation, so the model follows a changing workload; at most
// maxShapes shapes are kept. It is not safe for concurrent use.
type Workload struct {
	weights map[shapeKey]float64 // shape -> decayed count
	// cpu: shape -> decayed sum of the millicores its requests asked, on
	// the same scale as weights.
	cpu map[shapeKey]float64
	// mem: likewise for memory, in MiB.
	mem map[shapeKey]float64
	// scale is the factor by which stored weights must be multiplied to get
	// their current value; decaying all weights is a multiplication of it.
	scale float64
}

type shapeKey struct {
	units int64
	cards int
}

const (
	// workloadDecay is the weight a shape keeps per later observation:
	// a shape seen 1,000 observations ago counts ~37% of a new one.
	workloadDecay = 0.999
	maxShapes     = 64
	// TypicalShapes is how many shapes Typical returns at most.
	TypicalShapes = 16
)

// NewWorkload returns an empty model.
func NewWorkload() *Workload {
	return &Workload{weights: map[shapeKey]float64{}, cpu: map[shapeKey]float64{}, mem: map[shapeKey]float64{}, scale: 1}
}

// Observe records the container shapes of one pod's demand.
func (w *Workload) Observe(d gpushare.Demand) { w.ObserveCPU(d, 0, 0) }

// ObserveCPU records the container shapes of one pod's demand and the CPU
// the pod asks, in millicores, shared among its containers by units.
func (w *Workload) ObserveCPU(d gpushare.Demand, milliCPU, memMiB int64) {
	total := d.Total()
	for _, c := range d {
		w.scale /= workloadDecay
		k := shapeKey{c.Units, c.Cards}
		w.weights[k] += w.scale
		if milliCPU > 0 && total > 0 {
			w.cpu[k] += w.scale * float64(milliCPU) * float64(c.Total()) / float64(total)
		}
		if memMiB > 0 && total > 0 {
			w.mem[k] += w.scale * float64(memMiB) * float64(c.Total()) / float64(total)
		}
	}
	if w.scale > 1e100 { // renormalise before float64 overflows
		for k := range w.weights {
			w.weights[k] /= w.scale
			w.cpu[k] /= w.scale
			w.mem[k] /= w.scale
		}
		w.scale = 1
	}
	if len(w.weights) > maxShapes {
		w.evictLightest()
	}
}

func (w *Workload) evictLightest() {
	var lightest shapeKey
	lw := math.Inf(1)
	for k, v := range w.weights {
		if v < lw || (v == lw && (k.units < lightest.units)) {
			lightest, lw = k, v
		}
	}
	delete(w.weights, lightest)
	delete(w.cpu, lightest)
	delete(w.mem, lightest)
}

// Typical returns up to TypicalShapes heaviest shapes with weights summing to 1,
// heaviest first (ties: smaller first). Empty before any observation.
func (w *Workload) Typical() []Shape {
	out := make([]Shape, 0, len(w.weights))
	for k, v := range w.weights {
		out = append(out, Shape{Units: k.units, Cards: k.cards, Weight: v, MilliCPU: w.cpu[k] / v, MemoryMiB: w.mem[k] / v})
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Weight != out[b].Weight {
			return out[a].Weight > out[b].Weight
		}
		if out[a].Units != out[b].Units {
			return out[a].Units < out[b].Units
		}
		return out[a].Cards < out[b].Cards
	})
	if len(out) > TypicalShapes {
		out = out[:TypicalShapes]
	}
	var sum float64
	for _, s := range out {
		sum += s.Weight
	}
	for i := range out {
		out[i].Weight /= sum
	}
	return out
}
