package simulator

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

func TestSplitDRAPolicy(t *testing.T) {
	for _, tc := range []struct {
		entry, policy string
		dra           *DRA
		err           bool
	}{
		{entry: "fragaware", policy: "fragaware"},
		{entry: "fragaware@dra:index", policy: "fragaware", dra: &DRA{Order: DRAOrderIndex, NodeChoice: DRANodeExtender}},
		{entry: "binpack@dra:smallest-first/scheduler", policy: "binpack", dra: &DRA{Order: DRAOrderSmallestFirst, NodeChoice: DRANodeScheduler}},
		{entry: "fragaware@dra:random", err: true},
		{entry: "fragaware@dra:index/kubelet", err: true},
	} {
		t.Run(tc.entry, func(t *testing.T) {
			policy, d, err := SplitDRAPolicy(tc.entry)
			if (err != nil) != tc.err {
				t.Fatalf("SplitDRAPolicy(%q): err = %v, want error %v", tc.entry, err, tc.err)
			}
			if tc.err {
				return
			}
			if diff := cmp.Diff(tc.policy, policy); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.dra, d); diff != "" {
				t.Errorf("DRA (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDRACardChoice: the card a DRA replay takes is the first with room in
// its order. Node: gpu-0 16 GiB with 10 used, gpu-1 24 GiB with 4 used,
// gpu-2 16 GiB free; 6 GiB asked. (DRA's own allocator agrees on random
// nodes: dra/test/simulator.)
func TestDRACardChoice(t *testing.T) {
	node := func() *allocator.Node {
		return &allocator.Node{Name: "n", Unit: gpushare.UnitGiB, Cards: []allocator.Card{
			{Index: 0, Total: 16, Used: 10, Healthy: true},
			{Index: 1, Total: 24, Used: 4, Healthy: true},
			{Index: 2, Total: 16, Healthy: true},
		}}
	}
	for _, tc := range []struct {
		order DRAOrder
		units int64
		want  int
	}{
		{order: DRAOrderIndex, units: 6, want: 0},
		{order: DRAOrderSmallestFirst, units: 6, want: 0},
		{order: DRAOrderLargestFirst, units: 6, want: 1},
		{order: DRAOrderFullestFirst, units: 6, want: 0},
		{order: DRAOrderIndex, units: 7, want: 1},
		{order: DRAOrderSmallestFirst, units: 7, want: 2},
		{order: DRAOrderFullestFirst, units: 7, want: 2},
	} {
		t.Run(string(tc.order), func(t *testing.T) {
			p := draPolicy{inner: allocator.Binpack{}, dra: &DRA{Order: tc.order, NodeChoice: DRANodeExtender}}
			n := node()
			pl := &allocator.Placement{}
			if err := allocator.FitWith(n, gpushare.Demand{{Name: "c", Units: tc.units, Cards: 1}}, nil, p, pl); err != nil {
				t.Fatal(err)
			}
			if got := n.Cards[pl.Cards[0][0]].Index; got != tc.want {
				t.Errorf("%d GiB in order %s took gpu-%d, want gpu-%d", tc.units, tc.order, got, tc.want)
			}
		})
	}
}

// TestSliceOrderIsTheDRAReplay: the extender rates a claim pod's nodes
// with allocator.SliceOrder (cards tried by their Rank in the node's
// slice); the simulator's DRA replay with nodes rated by the extender
// (DRAPolicy, index order) must place and rate alike when each card's Rank
// is its index, as the driver's default --device-order publishes them: on
// random nodes and requests, the same card and the same node score.
func TestSliceOrderIsTheDRAReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 26))
	typical := []allocator.Shape{{Units: 4, Cards: 1, Weight: 0.5}, {Units: 8, Cards: 1, Weight: 0.3}, {Units: 16, Cards: 1, Weight: 0.2}}
	for _, name := range []string{allocator.NameFragAware, allocator.NameBinpack, allocator.NameSpread} {
		inner, err := allocator.New(name, typical, nil)
		if err != nil {
			t.Fatal(err)
		}
		replay := DRAPolicy(inner, &DRA{Order: DRAOrderIndex, NodeChoice: DRANodeExtender})
		extender := allocator.SliceOrder(inner)
		for trial := range 2000 {
			n := allocator.Node{Name: "n", Unit: "GiB"}
			for i := range int32(1 + rng.IntN(8)) {
				total := []int64{16, 24, 32, 40, 80}[rng.IntN(5)]
				n.Cards = append(n.Cards, allocator.Card{Index: int(i), Total: total, Used: rng.Int64N(total + 1), Healthy: rng.IntN(10) > 0, Rank: i})
			}
			d := gpushare.Demand{{Name: "gpu", Units: 1 + rng.Int64N(24), Cards: 1}}
			want, werr := allocator.Fit(&n, d, replay)
			got, gerr := allocator.Fit(&n, d, extender)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("%s trial %d: fits in the replay: %v, in the extender: %v", name, trial, werr, gerr)
			}
			if werr != nil {
				continue
			}
			if diff := cmp.Diff(want.Cards, got.Cards); diff != "" {
				t.Fatalf("%s trial %d, node %+v, demand %v: cards (-replay +extender):\n%s", name, trial, n.Cards, d, diff)
			}
			if w, g := replay.NodeScore(&n, want), extender.NodeScore(&n, got); w != g {
				t.Fatalf("%s trial %d: node score %v in the replay, %v in the extender", name, trial, w, g)
			}
		}
	}
}
