package allocator

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestSetCPUDemand(t *testing.T) {
	typical := []Shape{{Units: 1000, Cards: 1, Weight: 1, MilliCPU: 10000}}
	holes := func(freeUnits, freeMilliCPU int64, hostNodes int) *Holes {
		return &Holes{Cards: map[int64]int{}, FreeUnits: freeUnits, FreeMilliCPU: freeMilliCPU, HostNodes: hostNodes}
	}
	tests := []struct {
		name   string
		holes  *Holes
		demand float64 // millicores per unit
		want   float64
	}{
		// The doc's example: 10 cores free per 1000 units free, pods
		// asking 14 per 1000.
		{"doc: 14 asked per 10 free", holes(8000, 80000, 2), 14, 1.4},
		{"CPU to spare", holes(8000, 160000, 2), 10, 0.5},
		{"no holes known", nil, 14, 0},
		{"no node reports its CPU", holes(8000, 0, 0), 14, 0},
		{"no demand known", holes(8000, 80000, 2), 0, 0},
		{"no GPU memory free", holes(0, 80000, 2), 14, 0},
		{"CPU used up beside free cards", holes(8000, 0, 2), 14, math.Inf(1)},
		{"CPU over-committed", holes(8000, -2000, 2), 14, math.Inf(1)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFragAware(typical, tc.holes)
			f.SetCPUDemand(tc.demand)
			if diff := cmp.Diff(tc.want, f.Pressure(), cmpopts.EquateApprox(1e-12, 0)); diff != "" {
				t.Errorf("Pressure (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPressureSpreads places a whole-card pod on a busy node or an empty
// one, at equal waste (whole cards leave no hole): without pressure the
// packing term takes the busy node, under full pressure the spreading term
// the empty one, and between the two pressures the weight moves linearly.
func TestPressureSpreads(t *testing.T) {
	node := func(name string, used ...int64) *Node {
		n := &Node{Name: name}
		for i, u := range used {
			n.Cards = append(n.Cards, Card{Index: i, Total: 1000, Used: u, Healthy: true, Info: &CardInfo{Model: "T4"}})
		}
		return n
	}
	busy, empty := node("busy", 1000, 1000, 0, 0), node("empty", 0, 0, 0, 0)
	pl := &Placement{Reserved: []int64{0, 0, 1000, 0}}
	// 10 cores free per free card on both, so that the 10-core pod is
	// aligned on both (it takes half of busy's CPU and cards, a quarter of
	// empty's).
	host := func(freeMilliCPU int64) *Host {
		return &Host{FreeMilliCPU: freeMilliCPU, FreeMemoryMiB: 1 << 16, PodMilliCPU: 10000, PodMemoryMiB: 1024}
	}
	typical := []Shape{{Units: 1000, Cards: 1, Weight: 1, MilliCPU: 10000}}
	holes := &Holes{Cards: map[int64]int{}, FreeUnits: 6000, FreeMilliCPU: 60000, HostNodes: 2} // 10 cores per 1000 units
	tests := []struct {
		name      string
		demand    float64 // millicores per unit
		wantPack  float64 // packing weight, in cards
		wantFirst string
	}{
		{"no pressure: pack", 5, packWeight, "busy"},
		{"at the low end: still pack", 9.5, packWeight, "busy"},
		{"a third of the way: a weight below 0", 10, packWeight - (0.05/0.15)*(packWeight+spreadWeight), "empty"},
		{"full pressure: spread", 14, -spreadWeight, "empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFragAware(typical, holes)
			f.SetCPUDemand(tc.demand)
			if diff := cmp.Diff(tc.wantPack, f.packing(), cmpopts.EquateApprox(1e-9, 0)); diff != "" {
				t.Errorf("packing weight (-want +got):\n%s", diff)
			}
			b, e := f.NodeScoreHost(busy, pl, host(20000)), f.NodeScoreHost(empty, pl, host(40000))
			first := "busy"
			if e > b {
				first = "empty"
			}
			if first != tc.wantFirst {
				t.Errorf("busy node scores %g, empty node %g: %s first, want %s", b, e, first, tc.wantFirst)
			}
			// The packing term is the only difference: utilisation after
			// is 3/4 on busy, 1/4 on empty, 1000 units a card.
			if diff := cmp.Diff(tc.wantPack*1000*(0.75-0.25), b-e, cmpopts.EquateApprox(1e-9, 1e-9)); diff != "" {
				t.Errorf("busy − empty (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAlignmentCountsMemory: a pod asking little CPU but half a node's free
// memory is aligned with a node where it takes half the free GPU memory
// too, not with one where its memory share is far above its GPU share.
func TestAlignmentCountsMemory(t *testing.T) {
	node := func(name string) *Node {
		return &Node{Name: name, Cards: []Card{{Index: 0, Total: 1000, Healthy: true}, {Index: 1, Total: 1000, Healthy: true}}}
	}
	pl := &Placement{Reserved: []int64{1000, 0}} // half the node's free GPU memory
	f := NewFragAware([]Shape{{Units: 1000, Cards: 1, Weight: 1}}, nil)
	small := &Host{FreeMilliCPU: 40000, FreeMemoryMiB: 8192, PodMilliCPU: 20000, PodMemoryMiB: 4096}   // half of each
	starved := &Host{FreeMilliCPU: 40000, FreeMemoryMiB: 4096, PodMilliCPU: 20000, PodMemoryMiB: 4096} // all the memory
	a, b := f.NodeScoreHost(node("a"), pl, small), f.NodeScoreHost(node("b"), pl, starved)
	// Alignment 1 against 0.5/1: half of 0.6 of a card.
	if diff := cmp.Diff(0.5*alignWeight*1000, a-b, cmpopts.EquateApprox(1e-9, 1e-9)); diff != "" {
		t.Errorf("aligned − memory-starved (-want +got):\n%s", diff)
	}
}

// TestDeadMemory: the doc's example. A 15-core pod on a two-card node of
// 16 cores leaves the other card no CPU for any typical request (3 cores
// or more): its 1000 units are dead. On a node of 96 cores they are not;
// nor on a node that was already starved before the pod.
func TestDeadMemory(t *testing.T) {
	typical := []Shape{{Units: 1000, Cards: 1, Weight: 0.5, MilliCPU: 11000, MemoryMiB: 4096}, {Units: 300, Cards: 1, Weight: 0.5, MilliCPU: 3000, MemoryMiB: 8192}}
	f := NewFragAware(typical, nil)
	node := &Node{Name: "n", Cards: []Card{{Index: 0, Total: 1000, Healthy: true}, {Index: 1, Total: 1000, Healthy: true}}}
	pl := &Placement{Reserved: []int64{1000, 0}}
	tests := []struct {
		name string
		h    Host
		want float64 // dead units the pod makes
	}{
		{"doc: 16 cores, 15 taken", Host{FreeMilliCPU: 16000, FreeMemoryMiB: 1 << 16, PodMilliCPU: 15000}, 1000},
		{"96 cores", Host{FreeMilliCPU: 96000, FreeMemoryMiB: 1 << 16, PodMilliCPU: 15000}, 0},
		{"exactly the smallest request's CPU left", Host{FreeMilliCPU: 18000, FreeMemoryMiB: 1 << 16, PodMilliCPU: 15000}, 0},
		{"memory left for none", Host{FreeMilliCPU: 96000, FreeMemoryMiB: 4096, PodMilliCPU: 15000, PodMemoryMiB: 3584}, 1000},
		// Starved before: both cards were dead; the pod takes one of them.
		{"already starved", Host{FreeMilliCPU: 2000, FreeMemoryMiB: 1 << 16}, -1000},
		// 10 cores and 6000 MiB left: too little CPU for the 1000s, too
		// little memory for the 300s.
		{"each shape misses one resource", Host{FreeMilliCPU: 26000, FreeMemoryMiB: 1 << 16, PodMilliCPU: 16000, PodMemoryMiB: 1<<16 - 6000}, 1000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// The pod takes one card of the two, 1000 of 2000 free units.
			if diff := cmp.Diff(tc.want, f.deadMade(2000, 1000, &tc.h)); diff != "" {
				t.Errorf("dead units (-want +got):\n%s", diff)
			}
		})
	}
	// And the node score carries it: the doc's node scored by the typical
	// requests above and by ones that need 1 core, which the card left
	// over still serves. Whole cards waste nothing and there are no
	// multi-card shapes, so the dead card is the only difference.
	h := Host{FreeMilliCPU: 16000, FreeMemoryMiB: 1 << 16, PodMilliCPU: 15000}
	lean := NewFragAware([]Shape{{Units: 1000, Cards: 1, Weight: 1, MilliCPU: 1000}}, nil)
	if got := lean.score(node, pl, &h) - f.score(node, pl, &h); got != 1000 {
		t.Errorf("score without dead memory − score with = %g, want 1000", got)
	}
}
