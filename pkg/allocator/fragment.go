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
	// asked per container; 0 when no caller reported CPU (see ObservePod).
	MilliCPU float64
	// MemoryMiB likewise, in MiB.
	MemoryMiB float64
}

// FragAware, the default policy, places a pod where it destroys the least
// usable capacity for the requests the cluster typically sees, learned
// online by Workload (never from a trace). It refines FGD (Weng et al.,
// "Beware of Fragmentation", USENIX ATC '23; see FGD) in three ways.
//
// Capacity model. For a typical shape s (Units u on each of k cards, mean
// CPU and memory per request) a node can still host slots(s) requests:
// the number the cards' free memory admits (a card with free f takes ⌊f/u⌋
// slices; k-card requests need k distinct cards), capped, when the caller
// knows them (Host), by ⌊free CPU / CPU of s⌋ and ⌊free memory / memory of
// s⌋. The node's fragmentation is the free memory the typical request could
// not use, in expectation:
//
//	F(n) = Σ_s w_s · (free(n) − slots_s(n) · u_s · k_s)
//
// Unlike FGD, which counts a card as wholly usable as soon as one request
// fits, a card with 900 free serves one 470 request and strands 430; and a
// node whose cards are free but whose CPU is spent strands all of them.
//
// Node score: −ΔF, the fragmentation the placement removes (positive) or
// adds; plus, given a Host, an alignment term of 0.6 of a card times
// min(c, g)/max(c, g), where c and g are the shares of the node's free CPU
// and free GPU memory the pod takes, so that a pod goes where it uses both
// in proportion and leaves the node's CPU-to-GPU balance as it was (it
// adds 0.3 points at 100% arrival on the openb trace: the cap by mean CPU
// per shape misses pods of one GPU shape with very different CPU); plus a
// packing term of a tenth of a card times the node's GPU utilisation
// afterwards, so that among placements of equal ΔF the pod fills busy
// nodes and keeps empty ones whole for multi-card requests.
//
// Card choice: best fit (least free left), FGD's per-card ΔF breaking ties.
//
// Worked example, cards of 1000 units, typical requests 50% × 500 units
// with 4 cores and 50% × 1000 units with 8 cores, a pod of 500 units with 16
// cores, nodes A and B with two empty cards each, A with 20 cores free and
// B with 96:
//
//	A before: 500s: ⌊2000/500⌋=4 by GPU, ⌊20/4⌋=5 by CPU: 4 → 0 stranded
//	          1000s: 2 by GPU, ⌊20/8⌋=2 by CPU: 2 → 0 stranded        F = 0
//	A after:  free 500+1000, 4 cores: 500s: min(3, 1) = 1 → 1000 stranded
//	          1000s: min(1, 0) = 0 → 1500 stranded   F = ½·1000 + ½·1500 = 1250
//	B after:  free 500+1000, 80 cores: 500s: 3 → 0; 1000s: 1 → 500   F = 250
//
// Alignment: on A the pod takes 16/20 of the free CPU and 500/2000 of the
// free GPU memory, 600 × 0.25/0.8 = 187.5; on B 16/96 and 500/2000,
// 600 × 0.167/0.25 = 400. With the packing term (25 on both), B scores
// −250 + 400 + 25 = 175, A −1250 + 187.5 + 25 = −1037.5: the pod goes to B, where
// CPU is plentiful, instead of eating the CPU that A's remaining 1500 units
// need. GPU memory alone cannot tell A from B, and best fit on CPU would
// pick A.
//
// Without a Host (a node that reports no CPU) the CPU and memory caps are
// left out and NodeScore is the GPU-only form.
type FragAware struct {
	// shapes are the typical requests, weights summing to 1.
	shapes []Shape
	// inv[i] is 1/shapes[i].Units, to divide by multiplying.
	inv []float64
}

// NewFragAware returns the policy for the given typical requests. With none
// (no pod seen yet), it behaves as Binpack.
func NewFragAware(typical []Shape) *FragAware {
	f := &FragAware{shapes: typical, inv: make([]float64, len(typical))}
	for i, s := range typical {
		if s.Units > 0 {
			f.inv[i] = 1 / float64(s.Units)
		}
	}
	return f
}

// div is ⌊x/u⌋ for 0 ≤ x < 2⁵², computed with inv = 1/u and corrected.
func div(x, u int64, inv float64) int64 {
	q := int64(float64(x) * inv)
	if q*u > x {
		q--
	} else if (q+1)*u <= x {
		q++
	}
	return q
}

func (*FragAware) Name() string { return NameFragAware }

// CardKey is best fit: the card left with the least free memory. (Cards
// with equal free memory are interchangeable for the capacity model.)
func (*FragAware) CardKey(_ *Card, free, units int64) float64 { return float64(free - units) }

// packWeight is the packing term's weight in cards: a full node gains a
// tenth of a card over an empty one.
const packWeight = 0.1

// alignWeight is the alignment term's weight in cards: a pod that takes
// the same share of a node's free CPU as of its free GPU memory gains 0.6
// of a card over one that takes only one of them. Measured on the openb
// default trace (seeds 42–51, 100% arrival): 0 → 95.42%, 0.3 → 95.71%,
// 0.6 → 95.74%, 1.2 → 95.67%, 4 → 95.47%.
const alignWeight = 0.6

// Fragmentation returns F for cards with free units frees, without the CPU
// and memory caps.
func (f *FragAware) Fragmentation(frees []int64) float64 {
	var all int64
	for _, fr := range frees {
		all += fr
	}
	var frag float64
	for i := range f.shapes {
		s := &f.shapes[i]
		frag += s.Weight * float64(all-gpuSlots(frees, s)*s.Units*int64(s.Cards))
	}
	return frag
}

// gpuSlots is how many requests of s the free memory frees admits: for one
// card, Σ ⌊f/u⌋; for k cards, the largest t with Σ min(⌊f/u⌋, t) ≥ t·k.
func gpuSlots(frees []int64, s *Shape) int64 {
	var total int64
	for _, fr := range frees {
		total += fr / s.Units
	}
	if s.Cards <= 1 {
		return total
	}
	k := int64(s.Cards)
	for t := total / k; t > 0; t-- {
		var sum int64
		for _, fr := range frees {
			sum += min(fr/s.Units, t)
		}
		if sum >= t*k {
			return t
		}
	}
	return 0
}

// NodeScore is −ΔF without the CPU and memory caps, plus the packing term.
func (f *FragAware) NodeScore(n *Node, pl *Placement) float64 {
	return f.score(n, pl, nil)
}

// NodeScoreHost is −ΔF with the CPU and memory caps, plus the packing term.
func (f *FragAware) NodeScoreHost(n *Node, pl *Placement, h *Host) float64 {
	return f.score(n, pl, h)
}

func (f *FragAware) score(n *Node, pl *Placement, h *Host) float64 {
	// The cards the pod lands on (their free units before, and what the
	// pod takes there), and the node's totals.
	var buf [16]struct{ free, take int64 }
	changed := buf[:0]
	var fbuf [16]int64
	frees := fbuf[:0] // every card's free units before
	var taken, free, total, usedAfter int64
	healthy := 0
	for i := range n.Cards {
		c := &n.Cards[i]
		fr := c.Free()
		frees = append(frees, fr)
		free += fr
		r := pl.Reserved[i]
		if c.Healthy {
			total += c.Total
			usedAfter += min(c.Total, c.Used+r)
			healthy++
		}
		if r > 0 && fr > 0 {
			t := min(r, fr)
			changed = append(changed, struct{ free, take int64 }{fr, t})
			taken += t
		}
	}
	var delta float64 // ΔF
	for i := range f.shapes {
		s := &f.shapes[i]
		if s.Units <= 0 {
			continue
		}
		// Slots gained (negative: lost) by the GPU memory alone, from
		// the changed cards; exact for single-card shapes, and for
		// multi-card ones when no card crosses a multiple of Units.
		var dGPU int64
		for _, c := range changed {
			if c.free < s.Units {
				continue // no slot before, none after
			}
			q := div(c.free, s.Units, f.inv[i])
			if c.take <= c.free-q*s.Units {
				continue // the pod fits in the remainder
			}
			dGPU += div(c.free-c.take, s.Units, f.inv[i]) - q
		}
		before := int64(-1) // gpuSlots before the pod, when computed
		if s.Cards > 1 && dGPU != 0 {
			before = gpuSlots(frees, s)
			dGPU = slotsAfter(frees, pl, s) - before
		}
		dSlots := dGPU
		if h != nil && (s.MilliCPU > 0 || s.MemoryMiB > 0) {
			// The caps bind only if they may be below the GPU slots,
			// which are at most ⌊free/Units/Cards⌋.
			upper := free / s.Units / int64(max(1, s.Cards))
			if capSlots(math.MaxInt64, h.FreeMilliCPU-h.PodMilliCPU, h.FreeMemoryMiB-h.PodMemoryMiB, s) < upper {
				if before < 0 {
					before = f.slots(frees, s, f.inv[i])
				}
				dSlots = capSlots(before+dGPU, h.FreeMilliCPU-h.PodMilliCPU, h.FreeMemoryMiB-h.PodMemoryMiB, s) -
					capSlots(before, h.FreeMilliCPU, h.FreeMemoryMiB, s)
			}
		}
		delta += s.Weight * float64(-taken-dSlots*s.Units*int64(s.Cards))
	}
	if healthy == 0 {
		return -delta
	}
	card := float64(total) / float64(healthy) // the node's mean card, in units
	// Alignment: the pod's share of the node's free CPU against its share
	// of the node's free GPU memory, min/max in [0, 1]: 1 when the pod
	// takes both in proportion, so the node keeps its CPU-to-GPU balance.
	var align float64
	if h != nil && h.FreeMilliCPU > 0 && free > 0 {
		pc, pg := float64(h.PodMilliCPU)/float64(h.FreeMilliCPU), float64(taken)/float64(free)
		if hi := max(pc, pg); hi > 0 {
			align = min(pc, pg) / hi
		}
	}
	// Packing: a tenth of the node's mean card × its utilisation after.
	return -delta + alignWeight*card*align + packWeight*float64(usedAfter)/float64(healthy)
}

// slots is gpuSlots(frees, s), dividing by multiplying with inv = 1/s.Units
// for single-card shapes.
func (f *FragAware) slots(frees []int64, s *Shape, inv float64) int64 {
	if s.Cards > 1 {
		return gpuSlots(frees, s)
	}
	var total int64
	for _, fr := range frees {
		total += div(fr, s.Units, inv)
	}
	return total
}

// slotsAfter is gpuSlots for the cards' free units frees once pl is placed.
func slotsAfter(frees []int64, pl *Placement, s *Shape) int64 {
	var buf [16]int64
	after := buf[:0]
	for i, fr := range frees {
		after = append(after, max(0, fr-pl.Reserved[i]))
	}
	return gpuSlots(after, s)
}

// capSlots caps slots by the requests of s that cpu millicores and mem MiB
// admit; a shape with no known CPU (or memory) is not capped by it.
func capSlots(slots, cpu, mem int64, s *Shape) int64 {
	if s.MilliCPU > 0 {
		slots = min(slots, int64(float64(max(0, cpu))/s.MilliCPU))
	}
	if s.MemoryMiB > 0 {
		slots = min(slots, int64(float64(max(0, mem))/s.MemoryMiB))
	}
	return slots
}

var _ HostScorer = (*FragAware)(nil)

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
func (w *Workload) Observe(d gpushare.Demand) { w.ObservePod(d, 0, 0) }

// ObservePod records the container shapes of one pod's demand and the CPU
// (millicores) and memory (MiB) the pod asks, shared among its GPU
// containers by units; 0 when unknown.
func (w *Workload) ObservePod(d gpushare.Demand, milliCPU, memMiB int64) {
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
