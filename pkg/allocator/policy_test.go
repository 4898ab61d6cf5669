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
	typical := []Shape{{Units: 500, Cards: 1, Weight: 0.5, MilliCPU: 4000}, {Units: 1000, Cards: 1, Weight: 0.5, MilliCPU: 8000}}
	f := NewFragAware(typical)
	d := gpushare.Demand{app("c", 500)}
	host := func(cpu int64) *Host { return &Host{FreeMilliCPU: cpu, PodMilliCPU: 16000} }
	score := func(h *Host) float64 {
		n := milliNode(0, 0)
		pl, err := Fit(n, d, f)
		if err != nil {
			t.Fatal(err)
		}
		if h == nil {
			return f.NodeScore(n, pl)
		}
		return f.NodeScoreHost(n, pl, h)
	}
	// The packing term: a tenth of a 1000-unit card × utilisation 500/2000.
	const pack = 25
	// The alignment term, 0.6 of a card × min/max of the pod's shares of
	// free CPU and free GPU: A 16/20 and 500/2000, B 16/96 and 500/2000.
	const alignA, alignB = 600 * 0.25 / 0.8, 600 * (16.0 / 96) / 0.25
	tests := []struct {
		name string
		host *Host
		want float64
	}{
		{"A: 20 cores, the pod strands the rest", host(20000), -1250 + alignA + pack},
		{"B: 96 cores", host(96000), -250 + alignB + pack},
		{"without CPU, A and B are alike", nil, -250 + pack},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := score(tc.host); math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("score = %v, want %v", got, tc.want)
			}
		})
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
	f := NewFragAware([]Shape{{Units: 8, Cards: 2, Weight: 1}})
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

func TestWorkloadTypical(t *testing.T) {
	w := NewWorkload()
	if got := w.Typical(); len(got) != 0 {
		t.Fatalf("empty workload Typical() = %v", got)
	}
	for range 3 {
		w.Observe(gpushare.Demand{app("a", 4)})
	}
	w.Observe(gpushare.Demand{{Name: "b", Units: 8, Cards: 2}})
	got := w.Typical()
	if len(got) != 2 || got[0].Units != 4 || got[1].Cards != 2 {
		t.Fatalf("Typical() = %+v, want 4-unit shape first, then 8x2", got)
	}
	if s := got[0].Weight + got[1].Weight; s < 0.999 || s > 1.001 {
		t.Errorf("weights sum to %v, want 1", s)
	}
	if !(got[0].Weight > 0.7 && got[0].Weight < 0.76) {
		t.Errorf("4-unit weight %v, want ≈ 0.75 (3 of 4, slightly decayed)", got[0].Weight)
	}
	// Many shapes: the model stays bounded.
	for i := range 500 {
		w.Observe(gpushare.Demand{app("x", int64(i+100))})
	}
	if len(w.weights) > maxShapes {
		t.Errorf("workload keeps %d shapes, want ≤ %d", len(w.weights), maxShapes)
	}
	if got := len(w.Typical()); got != TypicalShapes {
		t.Errorf("Typical() has %d shapes, want %d", got, TypicalShapes)
	}
}

func TestNewPolicy(t *testing.T) {
	for _, name := range PolicyNames() {
		p, err := New(name, nil)
		if err != nil || p.Name() != name {
			t.Errorf("New(%q) = %v, %v", name, p, err)
		}
	}
	if _, err := New("worstfit", nil); err == nil || err.Error() != `unknown policy "worstfit"; want one of bestfit, binpack, fgd, fragaware, random, spread` {
		t.Errorf("New(worstfit) error = %v", err)
	}
}
