package allocator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// sidecarStorm is the pod issue 21 found stalling the extender: seven
// restartable init containers (sidecars) of 1 unit, then a plain init
// container of 15 units on each of 8 cards, then an app container of 1
// unit. It fits an 8×16 node only with the sidecars on seven distinct
// cards.
func sidecarStorm() gpushare.Demand {
	var d gpushare.Demand
	for i := range 7 {
		d = append(d, gpushare.ContainerDemand{Name: fmt.Sprintf("side%d", i), Units: 1, Cards: 1})
	}
	return append(d, gpushare.ContainerDemand{Name: "init", Init: true, Units: 15, Cards: 8},
		gpushare.ContainerDemand{Name: "app", Units: 1, Cards: 1})
}

func emptyNode(cards int, total int64) *Node {
	n := &Node{Name: "n", Unit: "GiB"}
	for i := range cards {
		n.Cards = append(n.Cards, Card{Index: i, Total: total, Healthy: true})
	}
	return n
}

// TestSidecarStormIsCheap: the search finds the storm pod's placement in
// few steps, and refuses it quickly where it cannot fit. Pruning twin cards
// and placements that leave an init container too little room keeps it
// cheap. Without that the search spends its whole node budget on this pod,
// and still answers no. Steps are counted, not timed.
func TestSidecarStormIsCheap(t *testing.T) {
	for _, tc := range []struct {
		name     string
		node     *Node
		wantFit  bool
		maxSteps int64
	}{
		{name: "fits an empty 8x16 node", node: emptyNode(8, 16), wantFit: true, maxSteps: 100},
		{name: "one card short of room", node: func() *Node { n := emptyNode(8, 16); n.Cards[3].Used = 2; return n }(), wantFit: false, maxSteps: 1000},
		{name: "sixteen cards", node: emptyNode(16, 16), wantFit: true, maxSteps: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []Policy{Binpack{}, Spread{}, NewFragAware(nil, nil)} {
				b := NewBudget(context.Background(), DefaultRequestSteps)
				pl := &Placement{}
				err := FitBudget(tc.node, sidecarStorm(), nil, p, pl, b)
				if got := err == nil; got != tc.wantFit {
					t.Errorf("%s: fits = %v (%v), want %v", p.Name(), got, err, tc.wantFit)
				}
				if err == nil {
					checkPlacement(t, tc.node, sidecarStorm(), pl)
				}
				var fe *FitError
				if errors.As(err, &fe) && fe.Budget {
					t.Errorf("%s: the search ran out of budget: %v", p.Name(), err)
				}
				if b.Spent() > tc.maxSteps {
					t.Errorf("%s: %d search steps, want at most %d", p.Name(), b.Spent(), tc.maxSteps)
				}
			}
		})
	}
}

// searchHeavy is a demand whose search no pruning shortens: 40 app
// containers of 4 units over 10 cards with 7, 9, ..., 25 units free. The
// 160 units asked equal the 160 free (so no total refuses it), yet the
// cards hold only 37 such containers: the search runs until a budget
// stops it.
func searchHeavy() (*Node, gpushare.Demand) {
	n := &Node{Name: "n", Unit: "GiB"}
	for i := range 10 {
		n.Cards = append(n.Cards, Card{Index: i, Total: 64, Used: 64 - int64(7+2*i), Healthy: true})
	}
	var d gpushare.Demand
	for i := range 40 {
		d = append(d, gpushare.ContainerDemand{Name: fmt.Sprintf("c%d", i), Units: 4, Cards: 1})
	}
	return n, d
}

// BenchmarkSearchStep measures one step of the search (a placement
// examined), the unit of DefaultRequestSteps: ns/op divided by the steps
// reported.
func BenchmarkSearchStep(b *testing.B) {
	n, d := searchHeavy()
	var steps int64
	for b.Loop() {
		budget := NewBudget(context.Background(), DefaultRequestSteps)
		_ = FitBudget(n, d, nil, Binpack{}, &Placement{}, budget)
		steps += budget.Spent()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(steps), "ns/step")
}

// TestBudgetRefusesNeverFits: a request's budget, spent or cancelled,
// refuses the demand with a reason that says so (FitError.Budget); it
// never reports a placement.
func TestBudgetRefusesNeverFits(t *testing.T) {
	n, d := searchHeavy()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name   string
		budget *Budget
		reason string
	}{
		{name: "steps spent", budget: NewBudget(context.Background(), 500), reason: "search budget spent: 500 placements examined in this request"},
		{name: "request cancelled", budget: NewBudget(cancelled, DefaultRequestSteps), reason: "request ended: context canceled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := FitBudget(n, d, nil, Binpack{}, &Placement{}, tc.budget)
			var fe *FitError
			if !errors.As(err, &fe) || !fe.Budget || !strings.Contains(fe.Reason, tc.reason) {
				t.Fatalf("FitBudget = %v, want a budget FitError saying %q", err, tc.reason)
			}
			if !Undecided(fe.Reason) {
				t.Errorf("Undecided(%q) = false, want true", fe.Reason)
			}
			// The next node of the request is refused without a search.
			err = FitBudget(n, d, nil, Binpack{}, &Placement{}, tc.budget)
			if !errors.As(err, &fe) || !fe.Budget || !strings.HasPrefix(fe.Reason, "not examined: ") {
				t.Errorf("after the budget ended, FitBudget = %v, want it refused as not examined", err)
			}
			if !Undecided(fe.Reason) {
				t.Errorf("Undecided(%q) = false, want true", fe.Reason)
			}
			// A demand that does not fit is decided, whatever the budget.
			tooBig := gpushare.Demand{{Name: "c", Units: 1 << 20, Cards: 1}}
			if err := FitBudget(n, tooBig, nil, Binpack{}, &Placement{}, NewBudget(context.Background(), DefaultRequestSteps)); !errors.As(err, &fe) || Undecided(fe.Reason) {
				t.Errorf("a demand larger than any card: FitBudget = %v, want a decided FitError", err)
			}
			// A single-card pod of one container needs no search: the
			// ended budget does not stop it.
			if err := FitBudget(n, gpushare.Demand{{Name: "c", Units: 1, Cards: 1}}, nil, Binpack{}, &Placement{}, tc.budget); err != nil {
				t.Errorf("a one-card pod after the budget ended: %v", err)
			}
		})
	}
}
