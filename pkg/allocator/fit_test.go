package allocator

import (
	"errors"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/quick"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// node builds a node from "total/used" pairs; a trailing "!" marks a card unhealthy.
func node(cards ...string) *Node {
	n := &Node{Name: "n1", Unit: "GiB"}
	for i, c := range cards {
		healthy := !strings.HasSuffix(c, "!")
		c = strings.TrimSuffix(c, "!")
		var total, used int64
		parts := strings.Split(c, "/")
		total = atoi(parts[0])
		used = atoi(parts[1])
		n.Cards = append(n.Cards, Card{Index: i, Total: total, Used: used, Healthy: healthy, Info: &CardInfo{UUID: "GPU-" + string(rune('a'+i))}})
	}
	return n
}

func atoi(s string) int64 {
	var v int64
	for _, r := range s {
		v = v*10 + int64(r-'0')
	}
	return v
}

func app(name string, units int64) gpushare.ContainerDemand {
	return gpushare.ContainerDemand{Name: name, Units: units, Cards: 1}
}

func TestFit(t *testing.T) {
	tests := []struct {
		name    string
		node    *Node
		demand  gpushare.Demand
		policy  Policy
		want    [][]int // card positions per container
		wantErr string
	}{
		{
			name:   "binpack picks the fullest card that fits",
			node:   node("16/0", "16/10", "16/4"),
			demand: gpushare.Demand{app("c", 6)},
			policy: Binpack{},
			want:   [][]int{{1}},
		},
		{
			name:   "spread picks the emptiest card",
			node:   node("16/8", "16/0", "16/4"),
			demand: gpushare.Demand{app("c", 6)},
			policy: Spread{},
			want:   [][]int{{1}},
		},
		{
			name:   "unhealthy card is skipped even if it is the best fit",
			node:   node("16/10!", "16/4"),
			demand: gpushare.Demand{app("c", 6)},
			policy: Binpack{},
			want:   [][]int{{1}},
		},
		{
			name:    "reason names the largest free card",
			node:    node("16/9", "16/12"),
			demand:  gpushare.Demand{app("c", 12)},
			policy:  Binpack{},
			wantErr: "node n1: container c needs 12 GiB on one GPU; largest free GPU has 7 of 16 GiB",
		},
		{
			name:    "all cards unhealthy",
			node:    node("16/0!", "16/0!"),
			demand:  gpushare.Demand{app("c", 1)},
			policy:  Binpack{},
			wantErr: "node n1: all 2 GPUs are unhealthy",
		},
		{
			name:   "two containers that only fit when the big one goes first",
			node:   node("16/6", "16/12"), // free 10 and 4
			demand: gpushare.Demand{app("small", 4), app("big", 10)},
			policy: Spread{}, // spread alone would put small on the 10-free card
			want:   [][]int{{1}, {0}},
		},
		{
			name:    "containers that fit one by one but not together",
			node:    node("16/8", "16/8"), // free 8 and 8
			demand:  gpushare.Demand{app("a", 6), app("b", 6), app("c", 3)},
			policy:  Binpack{},
			wantErr: "node n1: the containers' slices (6+6+3 GiB) do not fit together on the free cards (GPU0 8/16, GPU1 8/16 GiB free)",
		},
		{
			name:   "multi-card container takes distinct cards",
			node:   node("16/0", "16/0", "16/12"),
			demand: gpushare.Demand{{Name: "c", Units: 8, Cards: 2}},
			policy: Binpack{},
			want:   [][]int{{0, 1}},
		},
		{
			name:    "multi-card container needs enough cards",
			node:    node("16/0", "16/12", "16/12"),
			demand:  gpushare.Demand{{Name: "c", Units: 8, Cards: 2}},
			policy:  Binpack{},
			wantErr: "node n1: container c needs 8 GiB on each of 2 GPUs; 1 of 3 healthy GPUs have that much free",
		},
		{
			name:   "init container shares the app container's card",
			node:   node("16/0", "16/4"),
			demand: gpushare.Demand{{Name: "init", Init: true, Units: 8, Cards: 1}, app("c", 4)},
			policy: Binpack{},
			want:   [][]int{{1}, {1}},
		},
		{
			name:   "init container bigger than the free memory left after apps still fits alone",
			node:   node("16/4"), // free 12
			demand: gpushare.Demand{{Name: "init", Init: true, Units: 12, Cards: 1}, app("c", 2)},
			policy: Binpack{},
			want:   [][]int{{0}, {0}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := Fit(tc.node, tc.demand, tc.policy)
			if tc.wantErr != "" {
				var fe *FitError
				if !errors.As(err, &fe) {
					t.Fatalf("Fit() error = %v, want FitError %q", err, tc.wantErr)
				}
				if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
					t.Errorf("Fit() error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("Fit() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, pl.Cards); diff != "" {
				t.Errorf("Fit() cards (-want +got):\n%s", diff)
			}
			checkPlacement(t, tc.node, tc.demand, pl)
		})
	}
}

func TestPlacementReservesMaxOfInitAndApps(t *testing.T) {
	n := node("16/0")
	d := gpushare.Demand{{Name: "init", Init: true, Units: 8, Cards: 1}, app("a", 3), app("b", 3)}
	pl, err := Fit(n, d, Binpack{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{8}, pl.Reserved); diff != "" {
		t.Errorf("Reserved (-want +got):\n%s", diff)
	}
	a := Allocation(n, d, pl)
	if got := a.Total(); got != d.Total() {
		t.Errorf("Allocation.Total() = %d, want Demand.Total() = %d", got, d.Total())
	}
}

// checkPlacement verifies the placement's invariants against the node: on
// each card the pod reserves the larger of its non-init containers' sum and,
// for each plain init container there, that one plus the sidecars declared
// before it there (gpushare.Demand.Total's rule), and that fits the card.
func checkPlacement(t *testing.T, n *Node, d gpushare.Demand, pl *Placement) {
	t.Helper()
	running := make([]int64, len(n.Cards))
	initMax := make([]int64, len(n.Cards))
	for i, c := range d {
		if len(pl.Cards[i]) != c.Cards {
			t.Fatalf("container %s got %d cards, want %d", c.Name, len(pl.Cards[i]), c.Cards)
		}
		seen := map[int]bool{}
		for _, pos := range pl.Cards[i] {
			if seen[pos] {
				t.Fatalf("container %s uses card %d twice", c.Name, pos)
			}
			seen[pos] = true
			if c.Init {
				initMax[pos] = max(initMax[pos], running[pos]+c.Units)
			} else {
				running[pos] += c.Units
			}
		}
	}
	for pos := range n.Cards {
		want := max(running[pos], initMax[pos])
		if pl.Reserved[pos] != want {
			t.Fatalf("card %d reserved %d, want %d", pos, pl.Reserved[pos], want)
		}
		if want > n.Cards[pos].Free() {
			t.Fatalf("card %d over-committed: reserved %d, free %d (%+v)", pos, want, n.Cards[pos].Free(), n.Cards[pos])
		}
	}
}

// refEligible is the contract's rule for which cards a pod with
// constraints cc may use (gpushare.CardConstraints), written out plainly
// for the brute force: no cordoned card; a model matching one of Models
// (when any) and none of ExcludedModels; a UUID among UUIDs (when any) and
// not among ExcludedUUIDs; an unknown model or UUID only when no
// constraint reads it; with Enforced, a card in driver or mps mode, and
// only driver mode when a container of the pod's demand d spans several
// cards (MPS limits a client on one card).
func refEligible(cc *gpushare.CardConstraints, d gpushare.Demand, c *Card) bool {
	if c.Cordoned {
		return false
	}
	if cc == nil {
		return true
	}
	match := func(patterns []string) bool {
		return slices.ContainsFunc(patterns, func(p string) bool { return gpushare.MatchModel(p, c.Model()) })
	}
	if len(cc.Models) > 0 && (c.Model() == "" || !match(cc.Models)) {
		return false
	}
	if len(cc.ExcludedModels) > 0 && (c.Model() == "" || match(cc.ExcludedModels)) {
		return false
	}
	if len(cc.UUIDs) > 0 && (c.UUID() == "" || !slices.Contains(cc.UUIDs, c.UUID())) {
		return false
	}
	if len(cc.ExcludedUUIDs) > 0 && (c.UUID() == "" || slices.Contains(cc.ExcludedUUIDs, c.UUID())) {
		return false
	}
	if cc.Enforced {
		multiCard := slices.ContainsFunc(d, func(c gpushare.ContainerDemand) bool { return c.Cards > 1 })
		switch c.Isolation() {
		case gpushare.IsolationDriver:
		case gpushare.IsolationMPS:
			return !multiCard
		default:
			return false
		}
	}
	return true
}

// bruteForceFits reports whether any placement of d on the cards of n that
// refEligible allows under cc exists, by trying every assignment of every
// container's cards (init containers included) and checking each card's
// reservation by gpushare.Demand.Total's rule.
func bruteForceFits(n *Node, d gpushare.Demand, cc *gpushare.CardConstraints) bool {
	type slot struct{ container int }
	var slots []slot
	for i, c := range d {
		for range c.Cards {
			slots = append(slots, slot{container: i})
		}
	}
	assign := make([]int, len(slots))
	fits := func() bool {
		cards := make([][]int, len(d))
		for j, s := range slots {
			if slices.Contains(cards[s.container], assign[j]) {
				return false // a container uses a card once
			}
			cards[s.container] = append(cards[s.container], assign[j])
		}
		running := make([]int64, len(n.Cards))
		hold := make([]int64, len(n.Cards))
		for i, c := range d {
			for _, pos := range cards[i] {
				if c.Init {
					hold[pos] = max(hold[pos], running[pos]+c.Units)
				} else {
					running[pos] += c.Units
					hold[pos] = max(hold[pos], running[pos])
				}
			}
		}
		for pos := range n.Cards {
			if hold[pos] > 0 && !refEligible(cc, d, &n.Cards[pos]) || hold[pos] > n.Cards[pos].Free() {
				return false
			}
		}
		return true
	}
	var try func(k int) bool
	try = func(k int) bool {
		if k == len(slots) {
			return fits()
		}
		for c := range n.Cards {
			assign[k] = c
			if try(k + 1) {
				return true
			}
		}
		return false
	}
	return try(0)
}

// scenario is a random node, demand and card constraints (nil in half of
// them) for the property test.
type scenario struct {
	Node        *Node
	Demand      gpushare.Demand
	Constraints *gpushare.CardConstraints
}

func (scenario) Generate(r *rand.Rand, _ int) reflect.Value { // implements quick.Generator
	n := &Node{Name: "n", Unit: "GiB"}
	sizes := []int64{4, 8, 16, 24}
	models := []string{"Tesla T4", "Tesla-T4", "A100-SXM4-80GB", ""} // "": unknown, as without an inventory
	uuids := []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}
	isolations := []gpushare.Isolation{"", gpushare.IsolationNone, gpushare.IsolationMPS, gpushare.IsolationDriver, gpushare.IsolationDriver}
	for i := range 1 + r.Intn(4) {
		total := sizes[r.Intn(len(sizes))]
		c := Card{Index: i, Total: total, Used: r.Int63n(total + 1), Healthy: r.Intn(6) > 0, Cordoned: r.Intn(8) == 0}
		info := &CardInfo{Model: models[r.Intn(len(models))]}
		if info.Model != "" {
			info.UUID = uuids[i]
		}
		info.Isolation = isolations[r.Intn(len(isolations))]
		if info.Model != "" || info.Isolation != "" || r.Intn(2) == 0 {
			c.Info = info // a card without Info is one of unknown model, UUID and isolation
		}
		n.Cards = append(n.Cards, c)
	}
	var cc *gpushare.CardConstraints
	if r.Intn(2) == 0 {
		cc = &gpushare.CardConstraints{}
		some := func(pool []string) []string {
			var out []string
			for _, p := range pool {
				if r.Intn(4) == 0 {
					out = append(out, p)
				}
			}
			return out
		}
		patterns := []string{"A100*", "Tesla-T4", "*T4", "H100*", "?esla*"}
		cc.Models, cc.ExcludedModels = some(patterns), some(patterns)
		cc.UUIDs, cc.ExcludedUUIDs = some(uuids), some(uuids)
		if r.Intn(3) == 0 {
			// Isolation alone half the time, so that enough pods reach
			// the cards it decides on.
			cc.Enforced = true
			if r.Intn(2) == 0 {
				*cc = gpushare.CardConstraints{Enforced: true}
			}
		}
	}
	var d gpushare.Demand
	for i := range 1 + r.Intn(4) {
		d = append(d, gpushare.ContainerDemand{
			Name:  string(rune('a' + i)),
			Init:  r.Intn(5) == 0,
			Units: 1 + r.Int63n(10),
			Cards: 1 + r.Intn(2)*r.Intn(2),
		})
	}
	return reflect.ValueOf(scenario{Node: n, Demand: d, Constraints: cc})
}

// sidecarScenario is a random node and a demand with sidecars before a
// plain init container on several cards (the shapes that turn off the
// search's free-memory pruning), for the property test: at most 4 cards
// and 7 card slots, so brute force stays quick.
type sidecarScenario struct {
	Node   *Node
	Demand gpushare.Demand
}

func (sidecarScenario) Generate(r *rand.Rand, _ int) reflect.Value { // implements quick.Generator
	n := &Node{Name: "n", Unit: "GiB"}
	cards := 2 + r.Intn(3)
	for i := range cards {
		total := []int64{8, 16}[r.Intn(2)]
		n.Cards = append(n.Cards, Card{Index: i, Total: total, Used: r.Int63n(total/2 + 1), Healthy: r.Intn(8) > 0})
	}
	var d gpushare.Demand
	slots := 0
	add := func(init bool, maxCards int) {
		c := gpushare.ContainerDemand{Name: string(rune('a' + len(d))), Init: init, Units: 1 + r.Int63n(6), Cards: 1 + r.Intn(maxCards)}
		if slots+c.Cards <= 7 {
			d = append(d, c)
			slots += c.Cards
		}
	}
	for range 1 + r.Intn(3) {
		add(false, 2) // sidecars
	}
	add(true, cards) // the plain init container after them
	for range r.Intn(3) {
		add(r.Intn(3) == 0, 2)
	}
	return reflect.ValueOf(sidecarScenario{Node: n, Demand: d})
}

// TestFitMatchesBruteForceSidecars is TestFitMatchesBruteForce for pods
// whose plain init containers follow sidecars: the search prunes cards
// that are twins (same free memory, same containers) and partial
// placements that leave an init container too little room.
func TestFitMatchesBruteForceSidecars(t *testing.T) {
	typical := []Shape{{Units: 4, Cards: 1, Weight: 0.5}, {Units: 8, Cards: 2, Weight: 0.5}}
	for _, p := range []Policy{Binpack{}, Spread{}, NewFragAware(typical, nil)} {
		t.Run(p.Name(), func(t *testing.T) {
			prop := func(s sidecarScenario) bool {
				want := bruteForceFits(s.Node, s.Demand, nil)
				pl := &Placement{}
				err := FitWith(s.Node, s.Demand, nil, p, pl)
				if got := err == nil; got != want {
					t.Logf("node %+v demand %+v: FitWith ok=%v (err %v), brute force %v", s.Node.Cards, s.Demand, got, err, want)
					return false
				}
				if err == nil {
					checkPlacement(t, s.Node, s.Demand, pl)
				}
				return true
			}
			if err := quick.Check(prop, &quick.Config{MaxCount: 800, Rand: rand.New(rand.NewSource(1))}); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestFitMatchesBruteForce(t *testing.T) {
	typical := []Shape{{Units: 4, Cards: 1, Weight: 0.5}, {Units: 8, Cards: 1, Weight: 0.3}, {Units: 8, Cards: 2, Weight: 0.2}}
	for _, p := range []Policy{Binpack{}, Spread{}, NewFragAware(typical, nil), NewFragAware(typical, &Holes{Cards: map[int64]int{3: 2, 7: 1}, FreeUnits: 40}), NewFragAware(nil, nil)} {
		t.Run(p.Name(), func(t *testing.T) {
			prop := func(s scenario) bool {
				want := bruteForceFits(s.Node, s.Demand, s.Constraints)
				pl := &Placement{}
				err := FitWith(s.Node, s.Demand, s.Constraints, p, pl)
				if got := err == nil; got != want {
					t.Logf("node %+v demand %+v constraints %+v: FitWith ok=%v (err %v), brute force %v", s.Node.Cards, s.Demand, s.Constraints, got, err, want)
					return false
				}
				if err == nil {
					checkPlacement(t, s.Node, s.Demand, pl)
					for i, poss := range pl.Cards {
						for _, pos := range poss {
							if !refEligible(s.Constraints, s.Demand, &s.Node.Cards[pos]) {
								t.Logf("container %s placed on card %+v, which constraints %+v exclude", s.Demand[i].Name, s.Node.Cards[pos], s.Constraints)
								return false
							}
						}
					}
				}
				return true
			}
			if err := quick.Check(prop, &quick.Config{MaxCount: 3000, Rand: rand.New(rand.NewSource(1))}); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestAllocationListsCardsInIndexOrder: a multi-card container's cards are
// chosen in the policy's order (binpack takes the fuller card first), but
// the annotation lists them by card index, the order the device plugin
// gives NVIDIA_VISIBLE_DEVICES and ALIYUN_COM_GPU_MEM_IDX in, so that the
// pod's ALIYUN_COM_GPU_MEM_IDX and the container's first card agree.
func TestAllocationListsCardsInIndexOrder(t *testing.T) {
	n := node("16/0", "16/8", "16/4")
	d := gpushare.Demand{{Name: "c", Units: 4, Cards: 3}}
	pl, err := Fit(n, d, Binpack{})
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, s := range Allocation(n, d, pl).Containers[0].Devices {
		got = append(got, s.Index)
	}
	if diff := cmp.Diff([]int{0, 1, 2}, got); diff != "" {
		t.Errorf("devices of the container (-want +got), placement %v:\n%s", pl.Cards, diff)
	}
}
