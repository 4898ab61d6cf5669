package allocator

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// pick returns the name of the node p scores highest for d (the first on
// ties) and the card positions its containers get there.
func pick(t *testing.T, p Policy, d gpushare.Demand, h *Host, nodes ...*Node) (string, [][]int) {
	t.Helper()
	best, bestScore := -1, 0.0
	var bestCards [][]int
	for i, n := range nodes {
		pl, err := Fit(n, d, p)
		if err != nil {
			continue
		}
		s := p.NodeScore(n, pl)
		if hs, ok := p.(HostScorer); ok && h != nil {
			s = hs.NodeScoreHost(n, pl, h)
		}
		if best < 0 || s > bestScore {
			best, bestScore, bestCards = i, s, pl.Cards
		}
	}
	if best < 0 {
		return "", nil
	}
	return nodes[best].Name, bestCards
}

func named(name string, n *Node) *Node { n.Name = name; return n }

// TestPoliciesChoose checks each policy's node and card choice on tiny
// clusters worked out by hand.
func TestPoliciesChoose(t *testing.T) {
	half := []Shape{{Units: 500, Cards: 1, Weight: 0.5}, {Units: 1000, Cards: 1, Weight: 0.5}}
	tests := []struct {
		name      string
		policy    Policy
		demand    gpushare.Demand
		nodes     []*Node
		wantNode  string
		wantCards [][]int
	}{
		{
			// small: 16 GiB card empty → 12 free after, 25% used.
			// big: 80+80 GiB, 60 and 80 used → 16 free after, 90% used.
			name:      "binpack: the fuller node by share",
			policy:    Binpack{},
			demand:    gpushare.Demand{app("c", 4)},
			nodes:     []*Node{named("small", node("16/0")), named("big", node("80/60", "80/80"))},
			wantNode:  "big",
			wantCards: [][]int{{0}},
		},
		{
			name:      "bestfit: the node with the least left, in GiB",
			policy:    BestFit{},
			demand:    gpushare.Demand{app("c", 4)},
			nodes:     []*Node{named("small", node("16/0")), named("big", node("80/60", "80/80"))},
			wantNode:  "small",
			wantCards: [][]int{{0}},
		},
		{
			name:      "bestfit: the card with the least left",
			policy:    BestFit{},
			demand:    gpushare.Demand{app("c", 4)},
			nodes:     []*Node{named("n", node("16/0", "16/10", "16/12"))},
			wantNode:  "n",
			wantCards: [][]int{{2}},
		},
		{
			name:      "spread: the emptiest node and card",
			policy:    Spread{},
			demand:    gpushare.Demand{app("c", 4)},
			nodes:     []*Node{named("a", node("16/8", "16/4")), named("b", node("16/0", "16/2"))},
			wantNode:  "b",
			wantCards: [][]int{{0}},
		},
		{
			// FGD's doc example: A 700 free → ΔF +50, B 900 free → ΔF −150.
			name:      "fgd: the card that still serves a typical task",
			policy:    NewFGD([]Task{{Units: 500, Cards: 1, Weight: 0.5}, {Units: 1000, Cards: 1, Weight: 0.5}}),
			demand:    gpushare.Demand{app("c", 300)},
			nodes:     []*Node{named("A", milliNode(300)), named("B", milliNode(100))},
			wantNode:  "B",
			wantCards: [][]int{{0}},
		},
		{
			// Cards free 900, 1000 and 500: the first and the last each
			// lose 220 units of expected waste (650 → 430, 250 → 30), the
			// empty card would gain 280; best fit breaks the tie.
			name:      "fragaware: least waste, then best fit, on the card",
			policy:    NewFragAware(half, nil),
			demand:    gpushare.Demand{app("c", 470)},
			nodes:     []*Node{named("n", milliNode(100, 0, 500))},
			wantNode:  "n",
			wantCards: [][]int{{2}},
		},
		{
			// a: two empty cards; b: one card with 500 used and one empty.
			// On b's half card the pod closes a hole of expected waste
			// 250 (a 500 comes with chance ½); on a it opens one.
			name:      "fragaware: the half-used card over an empty node",
			policy:    NewFragAware(half, nil),
			demand:    gpushare.Demand{app("c", 500)},
			nodes:     []*Node{named("a", milliNode(0, 0)), named("b", milliNode(500, 0))},
			wantNode:  "b",
			wantCards: [][]int{{0}},
		},
		{
			// Every hole is waste: on big's 80/60 card the pod closes 4
			// of 20 (−3·−4); on small's empty card it opens a hole of 12.
			name:      "fragaware with no pod seen yet: the partly used card",
			policy:    NewFragAware(nil, nil),
			demand:    gpushare.Demand{app("c", 4)},
			nodes:     []*Node{named("small", node("16/0")), named("big", node("80/60", "80/80"))},
			wantNode:  "big",
			wantCards: [][]int{{0}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotNode, gotCards := pick(t, tc.policy, tc.demand, nil, tc.nodes...)
			if gotNode != tc.wantNode {
				t.Errorf("node = %q, want %q", gotNode, tc.wantNode)
			}
			if diff := cmp.Diff(tc.wantCards, gotCards); diff != "" {
				t.Errorf("cards (-want +got):\n%s", diff)
			}
		})
	}
}

// TestBestFitHost checks the example in BestFit's doc comment.
func TestBestFitHost(t *testing.T) {
	tests := []struct {
		name string
		node *Node
		cpu  int64
		want float64
	}{
		{"24 cores and 500 units left", milliNode(500), 24000, -0.15625},
		{"8 cores and 1500 units left", milliNode(500, 0), 8000, -(0.5*8.0/96 + 0.5*1500/8000)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nothing := &Placement{Cards: [][]int{nil}, Reserved: make([]int64, len(tc.node.Cards))}
			got := BestFit{}.NodeScoreHost(tc.node, nothing, &Host{FreeMilliCPU: tc.cpu, MaxMilliCPU: 96000, MaxUnits: 8000})
			if math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("NodeScoreHost = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFGDFragmentation checks FGD's measure by hand: GPU, CPU and models.
func TestFGDFragmentation(t *testing.T) {
	whole := []Task{{Units: 1000, Cards: 1, MilliCPU: 8000, Weight: 1}}
	tests := []struct {
		name  string
		tasks []Task
		frees []int64
		model string
		cpu   int64
		want  float64
	}{
		{"a whole card fits: partial cards are fragment", whole, []int64{1000, 500}, "T4", -1, 500},
		{"no whole card: all is fragment", whole, []int64{900, 500}, "T4", -1, 1400},
		{"the CPU lacks: all is fragment", whole, []int64{1000, 500}, "T4", 4000, 1500},
		{"enough CPU", whole, []int64{1000, 500}, "T4", 8000, 500},
		{"a model the task refuses: all is fragment", []Task{{Units: 1000, Cards: 1, Models: []string{"A100"}, Weight: 1}}, []int64{1000}, "T4", -1, 1000},
		{"two cards for a 2-card task: none", []Task{{Units: 1000, Cards: 2, Weight: 1}}, []int64{1000, 1000, 300}, "", -1, 300},
		{"CPU-only kind: all is fragment", []Task{{Units: 0, Weight: 1}}, []int64{1000, 300}, "", -1, 1300},
		{"weights", []Task{{Units: 500, Cards: 1, Weight: 0.5}, {Units: 1000, Cards: 1, Weight: 0.5}}, []int64{700}, "", -1, 350},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewFGD(tc.tasks).Fragmentation(tc.frees, tc.model, tc.cpu); got != tc.want {
				t.Errorf("Fragmentation = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFGDScoreHost: with the CPU test, a pod that leaves too little CPU
// for the typical task strands the node's whole free memory.
func TestFGDScoreHost(t *testing.T) {
	f := NewFGD([]Task{{Units: 1000, Cards: 1, MilliCPU: 8000, Weight: 1}})
	n := milliNode(0, 0)
	pl, err := Fit(n, gpushare.Demand{app("c", 500)}, f)
	if err != nil {
		t.Fatal(err)
	}
	// Before: a whole card fits and 8 cores are free: F = 0. After:
	// frees 500 and 1000; 4 cores left: F = 1500 (with CPU) or 500.
	if got := f.NodeScoreHost(n, pl, &Host{FreeMilliCPU: 8000, PodMilliCPU: 4000}); got != -1500 {
		t.Errorf("NodeScoreHost = %v, want -1500", got)
	}
	if got := f.NodeScore(n, pl); got != -500 {
		t.Errorf("NodeScore = %v, want -500", got)
	}
	// Over-committed CPU (requests above allocatable) is none left, not
	// unknown: all 2000 units are fragment before, 1500 after.
	if got := f.NodeScoreHost(n, pl, &Host{FreeMilliCPU: -1000, PodMilliCPU: 4000}); got != 500 {
		t.Errorf("NodeScoreHost, CPU over-committed = %v, want 500", got)
	}
	// The extender builds fgd with New from the learned shapes: their
	// mean CPU must reach the CPU test.
	learned, err := New(NameFGD, []Shape{{Units: 1000, Cards: 1, Weight: 1, MilliCPU: 7999.5}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := learned.(HostScorer).NodeScoreHost(n, pl, &Host{FreeMilliCPU: 8000, PodMilliCPU: 4000}); got != -1500 {
		t.Errorf("New(fgd) NodeScoreHost = %v, want -1500 (the CPU test)", got)
	}
}

// TestFragAwareCapacity checks the multi-card capacity model: requests on
// distinct cards, requests larger than a card, and the memory cap.
func TestFragAwareCapacity(t *testing.T) {
	tests := []struct {
		name  string
		shape Shape
		frees []int64
		want  float64
	}{
		{"single-card requests are Waste's, not F's", Shape{Units: 470, Cards: 1, Weight: 1}, []int64{900}, 0},
		{"two empty cards serve one 2×500 twice", Shape{Units: 500, Cards: 2, Weight: 1}, []int64{1000, 1000}, 0},
		{"3×1000 on four free cards: one request, 1000 stranded", Shape{Units: 1000, Cards: 3, Weight: 1}, []int64{1000, 1000, 1000, 1000}, 1000},
		{"a request larger than any card", Shape{Units: 2000, Cards: 2, Weight: 1}, []int64{1000, 1000}, 2000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := NewFragAware([]Shape{tc.shape}, nil).Fragmentation(tc.frees); got != tc.want {
				t.Errorf("Fragmentation(%v) = %v, want %v", tc.frees, got, tc.want)
			}
		})
	}
	// Memory caps like CPU. Cards free 1000, 1000 and 500; a 500 request
	// closes the 500 hole (nothing else would fill it: −3·(−500)). By GPU
	// memory two 2×500 requests fit before and after (ΔF = −500: F counts
	// the free memory); with 2048 MiB free and 1024 taken, memory admits
	// two before and one after: ΔF = −500 + 1000. Packing: 100 × 1000/3000.
	f := NewFragAware([]Shape{{Units: 500, Cards: 2, Weight: 1, MemoryMiB: 1024}}, nil)
	n := milliNode(0, 0, 500)
	pl, err := Fit(n, gpushare.Demand{app("c", 500)}, f)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]int{{2}}, pl.Cards); diff != "" {
		t.Errorf("cards (-want +got):\n%s", diff)
	}
	const pack = 100.0 / 3
	if got, want := f.NodeScore(n, pl), 1500+500+pack; math.Abs(got-want) > 1e-9 {
		t.Errorf("NodeScore = %v, want %v", got, want)
	}
	if got, want := f.NodeScoreHost(n, pl, &Host{FreeMemoryMiB: 2048, PodMemoryMiB: 1024}), 1500-500+pack; math.Abs(got-want) > 1e-9 {
		t.Errorf("NodeScoreHost = %v, want %v", got, want)
	}
}

// TestRandom: a seeded Random repeats itself, and every node that fits is
// chosen sometimes.
func TestRandom(t *testing.T) {
	draw := func(seed uint64) []string {
		p := NewRandom(rand.New(rand.NewPCG(seed, 0)))
		var got []string
		for range 60 {
			name, _ := pick(t, p, gpushare.Demand{app("c", 4)}, nil,
				named("a", node("16/0")), named("b", node("16/8")), named("c", node("16/14")), named("d", node("16/0", "16/0")))
			got = append(got, name)
		}
		return got
	}
	first := draw(7)
	if diff := cmp.Diff(first, draw(7)); diff != "" {
		t.Errorf("same seed, different draws (-first +second):\n%s", diff)
	}
	seen := map[string]int{}
	for _, n := range first {
		seen[n]++
	}
	for _, n := range []string{"a", "b", "d"} {
		if seen[n] == 0 {
			t.Errorf("node %s never chosen in 60 draws: %v", n, seen)
		}
	}
	if seen["c"] > 0 {
		t.Errorf("node c (2 GiB free) chosen for a 4 GiB pod")
	}
}

// BenchmarkFragAwareScore is the default policy's share of one prioritize
// call at 5,000 nodes × 8 cards: place and score a single-card pod on every
// node, as the extender's cache does (GPU only), and with a Host as the
// simulator does.
func BenchmarkFragAwareScore(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	sizes := []int64{1000, 810, 470, 320, 650, 230, 460, 590, 160, 550, 220, 370, 110, 480}
	// The typical requests of 2,000 pods of these sizes and one of 8 cards.
	var typical []Shape
	for _, u := range sizes {
		typical = append(typical, Shape{Units: u, Cards: 1, Weight: 2000.0 / 2001 / float64(len(sizes)), MilliCPU: 8000, MemoryMiB: 32768})
	}
	typical = append(typical, Shape{Units: 1000, Cards: 8, Weight: 1.0 / 2001, MilliCPU: 64000, MemoryMiB: 262144})
	nodes := make([]*Node, 5000)
	holes := NewHoles()
	for i := range nodes {
		used := make([]int64, 8)
		for j := range used {
			used[j] = sizes[r.IntN(len(sizes))] * int64(r.IntN(2))
		}
		nodes[i] = milliNode(used...)
		holes.AddNode(nodes[i], 1)
	}
	f := NewFragAware(typical, holes)
	d := gpushare.Demand{app("c", 470)}
	pl := &Placement{}
	for _, host := range []bool{false, true} {
		b.Run(fmt.Sprintf("nodes=5000/host=%v", host), func(b *testing.B) {
			h := &Host{FreeMilliCPU: 48000, PodMilliCPU: 8000, FreeMemoryMiB: 196608, PodMemoryMiB: 32768}
			b.ReportAllocs()
			var sink float64
			for b.Loop() {
				for _, n := range nodes {
					if err := FitInto(n, d, f, pl); err != nil {
						continue
					}
					if host {
						sink += f.NodeScoreHost(n, pl, h)
					} else {
						sink += f.NodeScore(n, pl)
					}
				}
			}
			_ = sink
		})
	}
}

// TestFragAwareDeltaF checks the node score's incremental ΔF (it only
// recounts a multi-card shape when a card crosses a multiple of its Units)
// against Fragmentation before and after, on random nodes and pods.
func TestFragAwareDeltaF(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	typical := []Shape{
		{Units: 470, Cards: 1, Weight: 0.4},
		{Units: 1000, Cards: 2, Weight: 0.3},
		{Units: 300, Cards: 3, Weight: 0.2},
		{Units: 1000, Cards: 8, Weight: 0.1},
	}
	f := NewFragAware(typical, nil)
	for i := range 20000 {
		used := make([]int64, 1+r.IntN(8))
		for j := range used {
			used[j] = 10 * r.Int64N(101)
		}
		n := milliNode(used...)
		d := gpushare.Demand{{Name: "c", Units: 1 + r.Int64N(1000), Cards: 1 + r.IntN(2)}}
		pl, err := Fit(n, d, f)
		if err != nil {
			continue
		}
		frees := make([]int64, len(n.Cards))
		after := make([]int64, len(n.Cards))
		var waste float64
		var usedAfter int64
		for j := range n.Cards {
			c := &n.Cards[j]
			frees[j], after[j] = c.Free(), c.Free()-pl.Reserved[j]
			waste += f.cardWaste(after[j], c.Total) - f.cardWaste(frees[j], c.Total)
			usedAfter += c.Used + pl.Reserved[j]
		}
		want := -wasteWeight*waste - (f.Fragmentation(after) - f.Fragmentation(frees)) +
			packWeight*float64(usedAfter)/float64(len(n.Cards))
		if got := f.NodeScore(n, pl); math.Abs(got-want) > 1e-6 {
			t.Fatalf("case %d: cards used %v, demand %+v on %v: NodeScore %v, from Fragmentation %v", i, used, d[0], pl.Cards, got, want)
		}
	}
}

// BenchmarkFragAwareWasteMiB is what the waste model costs one request in
// a cluster counted in MiB (80 GiB cards) whose typical requests are not
// round numbers: the extender builds a FragAware per request, so Waste's
// memo starts empty each time.
func BenchmarkFragAwareWasteMiB(b *testing.B) {
	var typical []Shape
	for i, u := range []int64{1000, 1500, 2200, 3001, 4096, 5120, 6100, 7000, 8192, 10240, 12000, 16384, 20000, 24576, 40960, 81920} {
		typical = append(typical, Shape{Units: u, Cards: 1, Weight: float64(16 - i)})
	}
	holes := NewHoles()
	for _, free := range []int64{81000, 80100, 79000, 77777, 70000, 65536, 50000, 40000} {
		holes.Cards[free] = 10
	}
	holes.FreeUnits = 4000 * 81920
	b.ReportAllocs()
	var sink float64
	for b.Loop() {
		f := NewFragAware(typical, holes)
		for free := range holes.Cards {
			sink += f.Waste(free)
		}
	}
	_ = sink
}
