package allocator

import (
	"math"
)

// Shape is a typical request: Units on each of Cards cards, with its share
// of recent requests.
type Shape struct {
	Units int64
	Cards int
	// Weight is the share of recent requests of this shape; the weights of
	// workload.Workload.Typical sum to 1.
	Weight float64
	// MilliCPU is the mean CPU, in millicores, that requests of this shape
	// asked per container; 0 when no caller reported CPU (see workload.Workload.ObservePod).
	MilliCPU float64
	// MemoryMiB likewise, in MiB.
	MemoryMiB float64
}

// FragAware, the default policy, places a pod where it adds the least
// expected waste. Expected waste is GPU memory that the requests the cluster
// typically sees will never use. Package workload learns those requests online,
// never from a trace. Scoring the loss of usable capacity for typical
// requests is FGD's idea (see FGD); FragAware differs in what it counts.
//
// Holes. A partly used card with h units free is a hole. Holes compete for
// the requests that fit them. It takes R requests to fill the cluster: its
// free memory over the mean typical request, Holes.FreeUnits ÷
// Σ w·units·cards. A share w_s of them are of single-card shape s. H_s holes
// have room for one, counted as 1 when none has. So each hole can expect
// fill_s = w_s·R / H_s of them. A hole's expected waste is
//
//	Waste(h) = (1 − p)·h + p · Σ_s (fill_s/Σ fill) · Waste(h − u_s),  p = min(1, Σ fill_s)
//
// The sum runs over the single-card shapes that fit (u_s ≤ h). Waste(h) is h
// when none fits, and 0 for h = 0. Empty and full cards waste nothing. So the
// 190 units left beside an 810 request are waste when 160s are rare and many
// such holes wait for them. The 350 left beside a 650 are not, when 320s are
// common and few holes wait for them. Without a Holes
// (NewFragAware(typical, nil)) each hole expects fill_s = w_s, the chance
// that the next request fits.
//
// Multi-card requests need whole cards of one node, and CPU beside them.
// Take a typical multi-card shape s: Units u on each of k cards, with a mean
// CPU and memory per request. A node can still host slots(s) requests of s.
// That is the number its cards' free memory admits: a card with free f takes
// ⌊f/u⌋ slices, on k distinct cards. Given a Host, ⌊free CPU / CPU of s⌋ and
// ⌊free memory / memory of s⌋ cap it. The node's multi-card fragmentation is
//
//	F(n) = Σ_s w_s · (free(n) − slots_s(n) · u_s · k_s)
//
// The node score is the sum of these terms:
//   - −3·ΔWaste over the cards the pod lands on, and −ΔF.
//   - Given a Host, alignment: 0.6 of a card times min(c, g)/max(c, g). g is
//     the share of the node's free GPU memory the pod takes. c is the larger
//     of its shares of the node's free CPU and free memory. So a pod goes
//     where it uses them in proportion, and the node keeps its balance.
//   - Packing: a tenth of a card times the node's GPU utilisation afterwards.
//     Among placements of equal waste the pod fills busy nodes. Empty ones
//     stay whole for multi-card requests.
//   - Given a Host, minus the dead memory the pod makes. That is the free GPU
//     memory it leaves on a node whose CPU or memory then holds no typical
//     request, less what was dead before.
//
// Example of dead memory: the typical requests ask 3 cores or more. A
// 15-core single-card pod on a node of two cards and 16 cores leaves its
// other card dead (−1000). The multi-card term alone would rather put it
// there than break an empty node of eight cards.
//
// CPU pressure. Packing is right while GPU memory is what runs out first.
// The pods arriving may ask more CPU per unit of GPU memory than the cluster
// has free beside its free GPU memory. Pods without GPU memory count too.
// Then CPU runs out first, and GPU memory is lost wherever a node's CPU is
// gone before its cards are full. The pressure is
//
//	κ = (CPU the recent pods asked ÷ GPU memory they asked) ÷ (Holes.FreeMilliCPU ÷ Holes.FreeUnits)
//
// SetCPUDemand sets it; until then it is 0, no pressure. From κ = 0.95 to
// 1.1 the packing weight goes linearly from +0.1 to −1 card. Under pressure
// GPU pods spread, so every node keeps CPU beside its free cards. Packing
// would fill some nodes and leave others' CPU whole for pods that take it
// without GPU memory. Example: cards of 1000 units, and 10 cores free per
// 1000 units free in the cluster. Recent pods ask 14 cores per 1000 units of
// theirs, CPU-only pods' cores included. Then κ = 1.4: full spreading.
//
// Card choice: the card whose expected waste grows least. Among equals, best
// fit: the least free memory left.
//
// Worked example. Cards have 1000 units. The typical requests are 60% ×
// 1000, 20% × 800 and 20% × 200, a mean of 800 units. The cluster has 16,000
// units free, so R = 20 requests fill it, 4 of them 200s. Eight cards hold an
// 800 each, and no other card is partly used. That makes eight 200-unit
// holes, each expecting fill₂₀₀ = 4/8 = 0.5 requests, so
//
//	Waste(200) = 0.5·200 + 0.5·Waste(0) = 100
//
// An 800 request on an empty card opens a ninth such hole: ΔWaste = +100.
// Had only two cards held an 800, fill₂₀₀ = 4/2 ≥ 1 and Waste(200) = 0. The
// same placement would then cost nothing, because the 200s to come fill
// every hole. A 200 request closes one of the eight holes (ΔWaste = −100).
// On an empty card it would open an 800-unit hole instead (ΔWaste = +47.2).
// No hole has room for an 800 yet, so fill₈₀₀ = 4/1, and fill₂₀₀ = 0.5:
//
//	Waste(800) = (4/4.5)·Waste(0) + (0.5/4.5)·Waste(600) ≈ 47.2
//	Waste(600) = 0.5·600 + 0.5·Waste(400) = 425,  Waste(400) = 0.5·400 + 0.5·Waste(200) = 250
//
// Best fit on memory alone closes the hole too. It cannot tell that the 800
// request's new hole is cheap when few holes compete for the 200s, and
// costly when many do.
//
// Without a Host (a node that reports no CPU) the CPU and memory caps and
// the alignment term are left out.
//
// What each term and weight is worth on Alibaba's openb traces is in
// docs/design/policies.md, "fragaware's terms and weights", beside the
// command that measures it.
//
// A FragAware memoises Waste as it scores, so it is not safe for concurrent
// use. Build one per request; the extender's cache does, under its lock.
type FragAware struct {
	// shapes are the typical requests, weights summing to 1.
	shapes []Shape
	// fill[i] is the requests of single-card shape i a hole can expect;
	// 0 for multi-card shapes. See Waste.
	fill []float64
	// grid is the step, in units, in which Waste counts holes and requests
	// (see setGrid). exact says every request is a multiple of it.
	// stepUnits[i] is single-card shape i in steps. memo[g] is the waste of
	// a hole of g steps, NaN until computed. byUnit[h] memoises Waste(h)
	// itself for h below unitMemo, the scorer's common case.
	grid      int64
	exact     bool
	stepUnits []int64
	memo      []float64
	byUnit    []float64
	// freeUnits and freeMilliCPU are the cluster's free GPU memory (units)
	// and the free CPU beside it (millicores), from the Holes, for the
	// pressure. hostNodes counts the nodes with cards that report their CPU.
	freeUnits, freeMilliCPU int64
	hostNodes               int
	// pressure is κ (see CPU pressure), 0 until SetCPUDemand. pack is the
	// packing weight for it, in cards.
	pressure, pack float64
	// The need fields are the least and the most CPU (millicores) and
	// memory (MiB) a typical request asks, 0 when unknown. They give starved
	// its quick answers.
	needCPULo, needCPUHi, needMemLo, needMemHi float64
	// freeByModel is Holes.FreeByModel. modelCost and modelFloor are the
	// model term's (see SetModels); nil and 0 leave it out.
	freeByModel map[string]int64
	modelCost   map[string]float64
	modelFloor  float64
}

// unitMemo bounds the hole sizes whose Waste is memoised by unit: every
// hole of a 1000 milli-unit card, or of a card counted in GiB.
const unitMemo = 4096

// NewFragAware returns the policy for the given typical requests and the
// cluster's holes. holes is nil when unknown; each hole then expects the
// chance that the next request fits it. With no typical request (no pod
// seen yet) every hole is waste. The policy then fills partly used cards
// before empty ones, and the packing term prefers busier nodes.
func NewFragAware(typical []Shape, holes *Holes) *FragAware {
	f := &FragAware{shapes: typical, fill: make([]float64, len(typical)), pack: packWeight}
	var mean float64 // units of the mean typical request
	for i, s := range typical {
		mean += s.Weight * float64(s.Units) * float64(max(1, s.Cards))
		if s.Units > 0 && s.Cards <= 1 {
			f.fill[i] = s.Weight
		}
	}
	f.setGrid()
	f.setNeeds()
	if holes != nil {
		f.freeUnits, f.freeMilliCPU, f.hostNodes = holes.FreeUnits, holes.FreeMilliCPU, holes.HostNodes
		f.freeByModel = holes.FreeByModel
	}
	if holes == nil || mean <= 0 {
		return f
	}
	requests := float64(holes.FreeUnits) / mean // R
	room := make([]int, len(typical))           // H_s
	for free, n := range holes.Cards {
		for i, s := range typical {
			if f.fill[i] > 0 && s.Units <= free {
				room[i] += n
			}
		}
	}
	for i := range typical {
		if f.fill[i] > 0 {
			f.fill[i] = f.fill[i] * requests / float64(max(1, room[i]))
		}
	}
	return f
}

// setNeeds records the least and most CPU and memory of the typical
// requests (see starved).
func (f *FragAware) setNeeds() {
	for i, s := range f.shapes {
		if i == 0 {
			f.needCPULo, f.needMemLo = s.MilliCPU, s.MemoryMiB
		}
		f.needCPULo, f.needCPUHi = min(f.needCPULo, s.MilliCPU), max(f.needCPUHi, s.MilliCPU)
		f.needMemLo, f.needMemHi = min(f.needMemLo, s.MemoryMiB), max(f.needMemHi, s.MemoryMiB)
	}
}

// starved reports whether a node with cpu millicores and mem MiB free can
// hold no typical request, whatever its cards. Its free GPU memory is then
// dead. A shape of unknown CPU and memory (0) fits anywhere. With no typical
// request nothing is starved.
func (f *FragAware) starved(cpu, mem int64) bool {
	c, m := float64(cpu), float64(mem)
	switch {
	case len(f.shapes) == 0 || c >= f.needCPUHi && m >= f.needMemHi:
		return false
	case c < f.needCPULo || m < f.needMemLo:
		return true
	}
	for i := range f.shapes {
		if c >= f.shapes[i].MilliCPU && m >= f.shapes[i].MemoryMiB {
			return false
		}
	}
	return true
}

// deadMade is the dead memory, in units, that a pod taking taken of a
// node's free units makes, given h. That is what it leaves on a node whose
// CPU or memory then holds no typical request, less what was dead before.
// It is negative when the pod takes memory that was dead.
func (f *FragAware) deadMade(free, taken int64, h *Host) float64 {
	var dead float64
	if f.starved(h.FreeMilliCPU-h.PodMilliCPU, h.FreeMemoryMiB-h.PodMemoryMiB) {
		dead += float64(free - taken)
	}
	if f.starved(h.FreeMilliCPU, h.FreeMemoryMiB) {
		dead -= float64(free)
	}
	return dead
}

// maxWasteSteps bounds the hole sizes, in grid steps, that Waste's
// recursion visits per request.
const maxWasteSteps = 4096

// setGrid chooses the step in which Waste counts, and each single-card
// request's size in steps. The step is the greatest common divisor of the
// requests' sizes when the largest is then within maxWasteSteps steps.
// That holds for openb, whose sizes are multiples of 10 milli-units, and for
// GiB requests, which are below 4096 GiB. Waste is then exact: the
// remainder of a hole below one step is waste, as no sum of requests can use
// it. Otherwise, as for MiB sizes that are not round numbers, the step is
// the largest request over maxWasteSteps. Holes and requests are then
// rounded to the nearest step, so a request that exactly fills a hole still
// does.
func (f *FragAware) setGrid() {
	var gcd, hi int64
	for i, s := range f.shapes {
		if f.fill[i] > 0 {
			a, b := gcd, s.Units
			for b != 0 {
				a, b = b, a%b
			}
			gcd, hi = a, max(hi, s.Units)
		}
	}
	f.grid, f.exact = max(1, gcd), true
	if hi/f.grid > maxWasteSteps {
		f.grid, f.exact = (hi+maxWasteSteps-1)/maxWasteSteps, false
	}
	f.stepUnits = make([]int64, len(f.shapes))
	for i, s := range f.shapes {
		if f.fill[i] > 0 {
			f.stepUnits[i] = f.toSteps(s.Units)
		}
	}
}

// toSteps is units in grid steps. It rounds down when the grid is exact,
// and to the nearest step, at least 1, otherwise.
func (f *FragAware) toSteps(units int64) int64 {
	if f.exact {
		return units / f.grid
	}
	return max(1, (units+f.grid/2)/f.grid)
}

// Waste is the units of a hole of h free units, on a partly used card,
// that the typical requests are expected never to use (see FragAware). It
// counts in grid steps (see setGrid).
func (f *FragAware) Waste(h int64) float64 {
	if h <= 0 {
		return 0
	}
	if h < unitMemo {
		f.byUnit = grow(f.byUnit, h)
		if w := f.byUnit[h]; !math.IsNaN(w) {
			return w
		}
	}
	g := f.toSteps(h)
	w := max(0, float64(h-g*f.grid)+float64(f.grid)*f.steps(g))
	if h < unitMemo {
		f.byUnit[h] = w
	}
	return w
}

// grow returns memo with room for index i, new entries NaN.
func grow(memo []float64, i int64) []float64 {
	if i < int64(len(memo)) {
		return memo
	}
	old := len(memo)
	memo = append(memo, make([]float64, max(i+1, int64(2*old), 64)-int64(old))...)
	for j := old; j < len(memo); j++ {
		memo[j] = math.NaN()
	}
	return memo
}

// steps is Waste for a hole of g steps, in steps, memoised.
func (f *FragAware) steps(g int64) float64 {
	if g <= 0 {
		return 0
	}
	f.memo = grow(f.memo, g)
	if w := f.memo[g]; !math.IsNaN(w) {
		return w
	}
	var rate, sum float64
	for i, u := range f.stepUnits {
		if r := f.fill[i]; r > 0 && u <= g {
			rate += r
			sum += r * f.steps(g-u)
		}
	}
	w := float64(g)
	if rate > 0 {
		p := min(1, rate)
		w = (1-p)*float64(g) + p*sum/rate
	}
	f.memo[g] = w
	return w
}

// cardWaste is Waste for a card of total units with free of them free. An
// empty or a full card wastes nothing.
func (f *FragAware) cardWaste(free, total int64) float64 {
	if free >= total {
		return 0
	}
	return f.Waste(free)
}

func (*FragAware) Name() string { return NameFragAware }

// CardKey is the growth of the card's expected waste. Best fit breaks
// ties: it adds a thousandth of the free memory left.
func (f *FragAware) CardKey(c *Card, free, units int64) float64 {
	return f.cardWaste(free-units, c.Total) - f.cardWaste(free, c.Total) + 1e-3*float64(free-units)
}

// packWeight is the packing term's weight in cards: a full node gains a
// tenth of a card over an empty one.
const packWeight = 0.1

// Under CPU pressure (see FragAware) the packing weight goes from
// packWeight at κ = pressureLow to −spreadWeight at κ = pressureHigh and
// above. It switches on κ because no single weight served both kinds of
// cluster. A negative weight helps when CPU runs out first, and costs when
// GPU memory does (docs/design/policies.md).
const (
	pressureLow, pressureHigh = 0.95, 1.1
	spreadWeight              = 1.0
)

// SetCPUDemand sets the CPU pressure κ from the CPU, in millicores, that
// the recent pods asked per unit of GPU memory they asked
// (workload.Workload.CPUPerUnit), all pods placed on GPU nodes counted, those without
// GPU memory too. No pressure when either is unknown (0, or no node with
// cards reports its CPU: Holes.HostNodes); the highest when the cluster
// has GPU memory free but no CPU. It changes the packing term only (see
// CPU pressure).
func (f *FragAware) SetCPUDemand(milliCPUPerUnit float64) {
	switch {
	case milliCPUPerUnit <= 0 || f.freeUnits <= 0 || f.hostNodes <= 0:
		f.pressure = 0
	case f.freeMilliCPU <= 0:
		f.pressure = math.Inf(1)
	default:
		f.pressure = milliCPUPerUnit * float64(f.freeUnits) / float64(f.freeMilliCPU)
	}
	f.pack = f.packing()
}

// Pressure returns κ as SetCPUDemand set it.
func (f *FragAware) Pressure() float64 { return f.pressure }

// packing is the packing term's weight for the pressure.
func (f *FragAware) packing() float64 {
	if f.pressure <= pressureLow {
		return packWeight
	}
	t := min(1, (f.pressure-pressureLow)/(pressureHigh-pressureLow))
	return packWeight - t*(packWeight+spreadWeight)
}

// wasteWeight is the weight of a unit of expected waste against a unit of
// multi-card fragmentation. docs/design/policies.md has the values tried.
const wasteWeight = 3

// alignWeight is the alignment term's weight in cards. A pod that takes
// the same share of a node's free CPU as of its free GPU memory gains 0.6
// of a card over one that takes only one of them. docs/design/policies.md
// has the values tried.
const alignWeight = 0.6

// Fragmentation returns F, the multi-card fragmentation, for cards with
// free units frees, without the CPU and memory caps. It leaves out
// single-card requests, which Waste covers.
func (f *FragAware) Fragmentation(frees []int64) float64 {
	var all int64
	for _, fr := range frees {
		all += fr
	}
	var frag float64
	for i := range f.shapes {
		if s := &f.shapes[i]; s.Cards > 1 && s.Units > 0 {
			frag += s.Weight * float64(all-gpuSlots(frees, s)*s.Units*int64(s.Cards))
		}
	}
	return frag
}

// gpuSlots is how many requests of s the free memory frees admits. For one
// card it is Σ ⌊f/u⌋. For k cards it is the largest t with
// Σ min(⌊f/u⌋, t) ≥ t·k.
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

// NodeScore is −3·ΔWaste − ΔF without the CPU and memory caps, plus the
// packing term.
func (f *FragAware) NodeScore(n *Node, pl *Placement) float64 {
	return f.score(n, pl, nil)
}

// NodeScoreHost is −3·ΔWaste − ΔF with the CPU and memory caps, plus the
// alignment and packing terms.
func (f *FragAware) NodeScoreHost(n *Node, pl *Placement, h *Host) float64 {
	return f.score(n, pl, h)
}

func (f *FragAware) score(n *Node, pl *Placement, h *Host) float64 {
	// A change is a card the pod lands on: its free units before, what the
	// pod takes there, and its total. The node's totals follow.
	type change struct{ free, take, total int64 }
	var buf [16]change
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
			changed = append(changed, change{fr, t, c.Total})
			taken += t
		}
	}
	var waste float64 // ΔWaste
	for _, c := range changed {
		waste += f.cardWaste(c.free-c.take, c.total) - f.cardWaste(c.free, c.total)
	}
	var model float64 // the model term (see SetModels)
	if f.modelCost != nil {
		for i := range n.Cards {
			if r := pl.Reserved[i]; r > 0 {
				model += f.modelTerm(n.Cards[i].Model(), min(r, n.Cards[i].Free()))
			}
		}
	}
	var delta float64 // ΔF
	for i := range f.shapes {
		s := &f.shapes[i]
		if s.Units <= 0 || s.Cards <= 1 {
			continue
		}
		// Slots gained by the GPU memory alone; negative when lost. A card
		// that keeps its slices of s cannot change them: the pod fits in
		// the remainder beside them.
		var dSlots int64
		before := int64(-1) // gpuSlots before the pod, when computed
		for _, c := range changed {
			if c.free >= s.Units && c.take > c.free%s.Units {
				before = gpuSlots(frees, s)
				dSlots = slotsAfter(frees, pl, s) - before
				break
			}
		}
		if h != nil && (s.MilliCPU > 0 || s.MemoryMiB > 0) {
			// The caps bind only if they may be below the GPU slots,
			// which are at most ⌊free/Units/Cards⌋.
			upper := free / s.Units / int64(s.Cards)
			if capSlots(math.MaxInt64, h.FreeMilliCPU-h.PodMilliCPU, h.FreeMemoryMiB-h.PodMemoryMiB, s) < upper {
				if before < 0 {
					before = gpuSlots(frees, s)
				}
				dSlots = capSlots(before+dSlots, h.FreeMilliCPU-h.PodMilliCPU, h.FreeMemoryMiB-h.PodMemoryMiB, s) -
					capSlots(before, h.FreeMilliCPU, h.FreeMemoryMiB, s)
			}
		}
		delta += s.Weight * float64(-taken-dSlots*s.Units*int64(s.Cards))
	}
	score := -wasteWeight*waste - delta - model
	if h != nil {
		score -= f.deadMade(free, taken, h)
	}
	if healthy == 0 {
		return score
	}
	card := float64(total) / float64(healthy) // the node's mean card, in units
	// Alignment compares the pod's share of the node's free CPU, or of
	// its free memory if larger, with its share of the node's free GPU
	// memory. It is min/max, in [0, 1]. It is 1 when the pod takes them in
	// proportion, so the node keeps its balance.
	var align float64
	if h != nil && h.FreeMilliCPU > 0 && free > 0 {
		pc, pg := float64(h.PodMilliCPU)/float64(h.FreeMilliCPU), float64(taken)/float64(free)
		if h.FreeMemoryMiB > 0 {
			pc = max(pc, float64(h.PodMemoryMiB)/float64(h.FreeMemoryMiB))
		}
		if hi := max(pc, pg); hi > 0 {
			align = min(pc, pg) / hi
		}
	}
	// Packing, or spreading under CPU pressure: f.pack of the node's mean
	// card × its utilisation after.
	return score + alignWeight*card*align + f.pack*float64(usedAfter)/float64(healthy)
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
// admit. A shape with no known CPU is not capped by CPU, nor one with no
// known memory by memory.
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

// NodeScoreCPU rates node n for a pod that asks no GPU memory, only the
// CPU and memory of h. The score is minus the growth of the node's stranded
// GPU memory. Stranded memory is what its cards still offer the typical
// requests but its CPU and memory no longer admit. Take each typical shape
// s, with mean CPU c_s and memory m_s per request. The cards admit G_s
// requests of s (slots, as in F). The node's free CPU and memory admit
// ⌊cpu/c_s⌋ and ⌊mem/m_s⌋ of them. The stranded memory is
//
//	S(n) = Σ_s w_s · max(0, G_s − min(⌊cpu/c_s⌋, ⌊mem/m_s⌋)) · u_s · k_s
//
// Nodes where the pod strands nothing all score 0, the most. The pod may go
// to any of them: the extender rates them all best, and kube-scheduler's own
// scores choose. Example: the typical requests all take one card of 1000
// units with 12 cores. A node with two empty cards and 30 cores free admits
// 2 of them. An 8-core pod leaves 22 cores, room for ⌊22/12⌋ = 1 request.
// It strands 1000 units: −1000. On a node whose cards are full it strands
// nothing: 0. Shapes with no known CPU or memory strand nothing.
func (f *FragAware) NodeScoreCPU(n *Node, h *Host) float64 {
	var fbuf [16]int64
	frees := fbuf[:0]
	for i := range n.Cards {
		frees = append(frees, n.Cards[i].Free())
	}
	return f.stranded(frees, h.FreeMilliCPU, h.FreeMemoryMiB) -
		f.stranded(frees, h.FreeMilliCPU-h.PodMilliCPU, h.FreeMemoryMiB-h.PodMemoryMiB)
}

// stranded is S for cards with free units frees, cpu millicores and mem
// MiB free (see NodeScoreCPU).
func (f *FragAware) stranded(frees []int64, cpu, mem int64) float64 {
	var s float64
	for i := range f.shapes {
		sh := &f.shapes[i]
		if sh.Units <= 0 || sh.MilliCPU <= 0 && sh.MemoryMiB <= 0 {
			continue
		}
		g := gpuSlots(frees, sh)
		if h := capSlots(g, cpu, mem, sh); h < g {
			s += sh.Weight * float64((g-h)*sh.Units*int64(max(1, sh.Cards)))
		}
	}
	return s
}

var _ CPUScorer = (*FragAware)(nil)
