package allocator

import "slices"

// Task is one kind of request of FGD's target workload. It asks Units on
// each of Cards cards, and MilliCPU millicores. Units 0 is a CPU-only task.
// It runs on a card of one of Models, or of any model when Models is empty.
// Weight is its share of the workload; the weights sum to 1.
type Task struct {
	Units    int64
	Cards    int
	MilliCPU int64
	Models   []string
	Weight   float64
}

// FGD is Fragmentation Gradient Descent as Weng et al. define it ("Beware
// of Fragmentation", USENIX ATC '23, §4). It is here for comparison with our
// default. A node's fragmentation is the GPU memory that a task drawn from
// the target workload could not use, in expectation:
//
//	F(n) = Σ_m w_m · F_m(n)
//
// For task kind m, every free unit of n is fragment (F_m = Σ free) when
// any of these holds:
//   - m is CPU-only;
//   - n's cards are not of a model m accepts;
//   - n lacks the CPU for m;
//   - fewer than m.Cards cards have m.Units free.
//
// Otherwise only the free units of the cards with less than m.Units free
// are fragment (F_m = Σ_{free<m.Units} free). FGD places a pod on the node,
// and the card, where F grows least.
//
// The target workload is fixed and known in advance. The study computes it
// from the trace being replayed. The CPU test needs a Host. Without one, as
// in NodeScore and the extender, every node is assumed to have the CPU.
//
// Worked example. The workload is 50% tasks of 500 units and 50% of 1000,
// a whole card. A 300-unit pod comes. Node A has one card with 700 free,
// node B one card with 900 free:
//
//	A before: 500 fits: 0; 1000 does not: ½·700 = 350          F = 350
//	  after (→400): neither fits: ½·400 + ½·400 = 400           ΔF = +50
//	B before: 500 fits: 0; 1000 does not: ½·900 = 450          F = 450
//	  after (→600): 500 still fits: 0; ½·600 = 300              ΔF = −150
//
// FGD picks B, which still serves 500-unit tasks afterwards. Best fit would
// pick A and leave 400 units that no typical task can use.
type FGD struct {
	tasks []Task
}

// NewFGD returns FGD for the target workload tasks.
func NewFGD(tasks []Task) *FGD { return &FGD{tasks: tasks} }

func (*FGD) Name() string { return NameFGD }

// accepts reports whether task t may run on a card of model.
func (t *Task) accepts(model string) bool {
	return len(t.Models) == 0 || slices.Contains(t.Models, model)
}

// CardKey is the growth of the card's share of F when units are taken from
// it. It counts every task kind as if the node could host it. That is exact
// for single-card tasks. For multi-card tasks, FGD's node score then
// accounts for whether enough cards remain.
func (f *FGD) CardKey(c *Card, free, units int64) float64 {
	var d float64
	after := free - units
	for i := range f.tasks {
		t := &f.tasks[i]
		if t.Units <= 0 || !t.accepts(c.Model()) {
			d -= t.Weight * float64(units)
			continue
		}
		d += t.Weight * (cardFragment(after, t.Units) - cardFragment(free, t.Units))
	}
	return d
}

func cardFragment(free, units int64) float64 {
	if free < units {
		return float64(free)
	}
	return 0
}

// Fragmentation returns F for cards with free units frees, of model, and
// cpu free millicores. A negative cpu is unknown, and always enough.
func (f *FGD) Fragmentation(frees []int64, model string, cpu int64) float64 {
	var all int64
	for _, fr := range frees {
		all += fr
	}
	var frag float64
	for i := range f.tasks {
		t := &f.tasks[i]
		if t.Units <= 0 || !t.accepts(model) || cpu >= 0 && cpu < t.MilliCPU {
			frag += t.Weight * float64(all)
			continue
		}
		var fits int
		var small int64
		for _, fr := range frees {
			if fr >= t.Units {
				fits++
			} else {
				small += fr
			}
		}
		if fits < t.Cards {
			frag += t.Weight * float64(all)
		} else {
			frag += t.Weight * float64(small)
		}
	}
	return frag
}

// NodeScore is −ΔF, assuming every node has the CPU.
func (f *FGD) NodeScore(n *Node, pl *Placement) float64 {
	return f.score(n, pl, -1, -1)
}

// NodeScoreHost is −ΔF with the CPU test. A node whose CPU is already
// over-committed has none left, not an unknown amount.
func (f *FGD) NodeScoreHost(n *Node, pl *Placement, h *Host) float64 {
	return f.score(n, pl, max(0, h.FreeMilliCPU), max(0, h.FreeMilliCPU-h.PodMilliCPU))
}

// NodeScoreCPU is −ΔF for a pod that asks no GPU memory. The study's
// simulator places such pods with FGD too. They make F grow only by leaving
// a node too little CPU for a task kind.
func (f *FGD) NodeScoreCPU(n *Node, h *Host) float64 {
	var buf [16]int64
	frees := buf[:0]
	for i := range n.Cards {
		frees = append(frees, n.Cards[i].Free())
	}
	model := nodeModel(n)
	return f.Fragmentation(frees, model, max(0, h.FreeMilliCPU)) - f.Fragmentation(frees, model, max(0, h.FreeMilliCPU-h.PodMilliCPU))
}

func (f *FGD) score(n *Node, pl *Placement, cpuBefore, cpuAfter int64) float64 {
	var buf [2][16]int64
	before, after := buf[0][:0], buf[1][:0]
	for i := range n.Cards {
		free := n.Cards[i].Free()
		before = append(before, free)
		after = append(after, max(0, free-pl.Reserved[i]))
	}
	model := nodeModel(n)
	return f.Fragmentation(before, model, cpuBefore) - f.Fragmentation(after, model, cpuAfter)
}

// nodeModel is the model of n's first card, "" without cards.
func nodeModel(n *Node) string {
	if len(n.Cards) == 0 {
		return ""
	}
	return n.Cards[0].Model()
}

var (
	_ HostScorer = (*FGD)(nil)
	_ CPUScorer  = (*FGD)(nil)
)
