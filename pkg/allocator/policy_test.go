package allocator

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

func TestNormalizeScores(t *testing.T) {
	tests := []struct {
		name string
		raw  []float64
		want []int64
	}{
		{"empty", nil, []int64{}},
		{"linear", []float64{0.2, 0.5, 0.8}, []int64{0, 5, 10}},
		{"all equal", []float64{3, 3}, []int64{10, 10}},
		{"negative", []float64{-4, 0, -2}, []int64{0, 10, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, NormalizeScores(tc.raw)); diff != "" {
				t.Errorf("NormalizeScores (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFragAwareWorkedExample checks the example in FragAware's doc comment.
func TestFragAwareWorkedExample(t *testing.T) {
	typical := []Shape{{Units: 1000, Cards: 1, Weight: 0.6}, {Units: 800, Cards: 1, Weight: 0.2}, {Units: 200, Cards: 1, Weight: 0.2}}
	eight := &Holes{Cards: map[int64]int{200: 8}, FreeUnits: 16000}
	f := NewFragAware(typical, eight)
	wastes := []struct {
		h    int64
		want float64
	}{
		{200, 100}, {400, 250}, {600, 425}, {800, 0.5 * 425 / 4.5}, {100, 100}, {0, 0},
	}
	for _, tc := range wastes {
		if got := f.Waste(tc.h); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("eight holes: Waste(%d) = %v, want %v", tc.h, got, tc.want)
		}
	}
	if got := NewFragAware(typical, &Holes{Cards: map[int64]int{200: 2}, FreeUnits: 16000}).Waste(200); got != 0 {
		t.Errorf("two holes: Waste(200) = %v, want 0", got)
	}

	// An 800 request on an empty node opens a ninth hole: −3·100, plus
	// the packing term (a tenth of a card × 800/2000).
	n := milliNode(0, 0)
	pl, err := Fit(n, gpushare.Demand{app("c", 800)}, f)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := f.NodeScore(n, pl), -300+100*800.0/2000; math.Abs(got-want) > 1e-9 {
		t.Errorf("800 on an empty node: score %v, want %v", got, want)
	}
	// A 200 request closes a hole rather than open a card.
	node, cards := pick(t, f, gpushare.Demand{app("c", 200)}, nil, named("empty", milliNode(0, 0)), named("hole", milliNode(0, 800)))
	if node != "hole" || cmp.Diff([][]int{{1}}, cards) != "" {
		t.Errorf("200 request went to %s %v, want hole [[1]]", node, cards)
	}
}

// TestFragAwareWaste checks Waste by hand where holes are unknown (each
// shape fills with its weight), in MiB, and on the coarse grid that sizes
// without a common divisor get.
func TestFragAwareWaste(t *testing.T) {
	half := NewFragAware([]Shape{{Units: 500, Cards: 1, Weight: 0.5}, {Units: 1000, Cards: 1, Weight: 0.5}}, nil)
	mib := NewFragAware([]Shape{{Units: 4096, Cards: 1, Weight: 1}}, nil)
	// Sizes with no common divisor but 1, the largest 81920: steps of 20
	// units, holes and requests rounded to the nearest step. Each fills
	// with chance 1 (fill = weight without holes).
	coarse := NewFragAware([]Shape{{Units: 3001, Cards: 1, Weight: 1}, {Units: 81920, Cards: 1, Weight: 1}}, nil)
	none := NewFragAware(nil, nil)
	tests := []struct {
		name string
		f    *FragAware
		h    int64
		want float64
	}{
		{"nothing fits: all of it", half, 430, 430},
		{"a 500 fits with chance ½", half, 500, 250},
		{"then 400 that nothing fits", half, 900, 0.5*900 + 0.5*400},
		{"MiB: one 4096 and 904 left", mib, 5000, 904},
		{"MiB: two 4096s", mib, 8192, 0},
		{"no pod seen yet: all of it", none, 12, 12},
		{"MiB, not round: an exact fit survives the rounding", coarse, 3001, 1},
		{"MiB, not round: two of them", coarse, 6002, 2},
		{"MiB, not round: a unit short rounds to a fit", coarse, 2999, 0},
		{"MiB, not round: 12 units short does not", coarse, 2989, 2989},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.f.Waste(tc.h); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("Waste(%d) = %v, want %v", tc.h, got, tc.want)
			}
		})
	}
}

// TestHolesAddNode: holes are healthy cards neither empty nor full, and
// taking a node out undoes putting it in.
func TestHolesAddNode(t *testing.T) {
	h := NewHoles()
	n := milliNode(0, 300, 1000, 300)
	n.Cards = append(n.Cards, Card{Index: 4, Total: 1000, Used: 100}) // unhealthy
	h.AddNode(n, 1)
	want := &Holes{Cards: map[int64]int{700: 2}, FreeUnits: 2400, FreeByModel: map[string]int64{"": 2400}}
	if diff := cmp.Diff(want, h); diff != "" {
		t.Errorf("after AddNode (-want +got):\n%s", diff)
	}
	h.AddNode(n, -1)
	if diff := cmp.Diff(NewHoles(), h); diff != "" {
		t.Errorf("after taking it out (-want +got):\n%s", diff)
	}
}

// milliNode returns a node of 1000-unit cards with the given units used.
func milliNode(used ...int64) *Node {
	n := &Node{Name: "n1", Unit: "milli"}
	for i, u := range used {
		n.Cards = append(n.Cards, Card{Index: i, Total: 1000, Used: u, Healthy: true})
	}
	return n
}

func TestFragmentationMultiCard(t *testing.T) {
	f := NewFragAware([]Shape{{Units: 8, Cards: 2, Weight: 1}, {Units: 3, Cards: 1, Weight: 1}}, nil)
	tests := []struct {
		frees []int64
		want  float64
	}{
		{[]int64{8, 8, 3}, 3},   // two cards serve it; the 3 cannot
		{[]int64{8, 7, 3}, 18},  // no pair of cards: all free is fragment
		{[]int64{16, 16}, 0},    // two requests: 8 on each card, twice
		{[]int64{16, 7, 3}, 26}, // one 16-unit card cannot take both slices
	}
	for _, tc := range tests {
		if got := f.Fragmentation(tc.frees); got != tc.want {
			t.Errorf("Fragmentation(%v) = %v, want %v", tc.frees, got, tc.want)
		}
	}
}

func TestNewPolicy(t *testing.T) {
	for _, name := range PolicyNames() {
		p, err := New(name, nil, nil)
		if err != nil || p.Name() != name {
			t.Errorf("New(%q) = %v, %v", name, p, err)
		}
	}
	if _, err := New("worstfit", nil, nil); err == nil || err.Error() != `unknown policy "worstfit"; want one of bestfit, binpack, fgd, fragaware, random, spread` {
		t.Errorf("New(worstfit) error = %v", err)
	}
}

func TestMarkBest(t *testing.T) {
	tests := []struct {
		name string
		raw  []float64
		want []int64
	}{
		{"empty", nil, []int64{}},
		{"the doc's example", []float64{0, -1000, 0}, []int64{10, 0, 10}},
		{"one best, others close", []float64{-1, -1.0001, -50}, []int64{10, 0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, MarkBest(tc.raw)); diff != "" {
				t.Errorf("MarkBest (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNodeScoreCPU checks what a pod that asks no GPU memory costs on a
// node, for FragAware (stranded GPU memory, the doc's example among them)
// and FGD (the growth of F by the CPU test).
func TestNodeScoreCPU(t *testing.T) {
	cards := func(used ...int64) *Node {
		n := &Node{Name: "n"}
		for i, u := range used {
			n.Cards = append(n.Cards, Card{Index: i, Total: 1000, Used: u, Healthy: true, Info: &CardInfo{Model: "T4"}})
		}
		return n
	}
	whole := NewFragAware([]Shape{{Units: 1000, Cards: 1, Weight: 1, MilliCPU: 12000, MemoryMiB: 1024}}, nil)
	mixed := NewFragAware([]Shape{{Units: 500, Cards: 1, Weight: 0.5, MilliCPU: 4000}, {Units: 1000, Cards: 2, Weight: 0.5, MilliCPU: 16000, MemoryMiB: 8192}}, nil)
	fgd := NewFGD([]Task{{Units: 1000, Cards: 1, MilliCPU: 12000, Weight: 0.5}, {Units: 0, MilliCPU: 2000, Weight: 0.5}})
	tests := []struct {
		name string
		p    CPUScorer
		n    *Node
		h    Host
		want float64
	}{
		{"doc: two empty cards, 30 cores, 8 taken: one 1000 stranded", whole, cards(0, 0), Host{FreeMilliCPU: 30000, FreeMemoryMiB: 8192, PodMilliCPU: 8000}, -1000},
		{"doc: full cards strand nothing", whole, cards(1000, 1000), Host{FreeMilliCPU: 30000, FreeMemoryMiB: 8192, PodMilliCPU: 8000}, 0},
		{"CPU to spare: nothing stranded", whole, cards(0, 0), Host{FreeMilliCPU: 40000, FreeMemoryMiB: 8192, PodMilliCPU: 8000}, 0},
		{"memory binds", whole, cards(0, 0), Host{FreeMilliCPU: 40000, FreeMemoryMiB: 2048, PodMemoryMiB: 1024}, -1000},
		// The cards admit three 500s (CPU: ⌊13/4⌋ = 3, after 9 cores 1:
		// 0.5·2·500 stranded) and no two-card 1000 (one card is half
		// used), so the 1000s' CPU and memory do not matter.
		{"a mix: the single-card shape is stranded", mixed, cards(0, 500), Host{FreeMilliCPU: 13000, FreeMemoryMiB: 1 << 20, PodMilliCPU: 9000}, -500},
		// FGD: the 1000 task needs 12 cores; 14 free, 4 taken leaves 10:
		// all 1000 free units become fragment for half the workload.
		{"fgd: the CPU test fails after", fgd, cards(0, 1000), Host{FreeMilliCPU: 14000, PodMilliCPU: 4000}, -500},
		{"fgd: CPU to spare", fgd, cards(0, 1000), Host{FreeMilliCPU: 40000, PodMilliCPU: 4000}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.p.NodeScoreCPU(tc.n, &tc.h); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("NodeScoreCPU = %g, want %g", got, tc.want)
			}
		})
	}
}
