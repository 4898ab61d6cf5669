package allocator

import (
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// modelNode is a node of cards of one model, each total units with used
// taken.
func modelNode(name, model string, total int64, used ...int64) *Node {
	n := &Node{Name: name, Unit: "milli"}
	for i, u := range used {
		n.Cards = append(n.Cards, Card{Index: i, Total: total, Used: u, Healthy: true, Info: &CardInfo{Model: model}})
	}
	return n
}

func holesOf(nodes ...*Node) *Holes {
	h := NewHoles()
	for _, n := range nodes {
		h.AddNode(n, 1)
	}
	return h
}

func TestModelCosts(t *testing.T) {
	t4 := Restriction{Models: []string{"Tesla T4"}, Share: 0.25}
	v100 := Restriction{Models: []string{"V100*"}, Share: 0.1}
	notT4 := Restriction{ExcludedModels: []string{"*T4"}, Share: 0.5}
	// 10,000 units free: 2,000 on T4s, 4,000 on V100s, 4,000 on A100s.
	holes := &Holes{FreeUnits: 10000, FreeByModel: map[string]int64{"Tesla T4": 2000, "V100-SXM2-32GB": 4000, "A100-SXM4-80GB": 4000}}
	tests := []struct {
		name  string
		rs    []Restriction
		holes *Holes
		want  map[string]float64
	}{
		{"none restricted", nil, holes, nil},
		{"no holes", []Restriction{t4}, nil, nil},
		{"models unknown", []Restriction{t4}, &Holes{FreeUnits: 100}, nil},
		// The doc's example: 0.25·10,000/2,000 ≥ 1.
		{"a quarter to T4", []Restriction{t4}, holes, map[string]float64{"Tesla T4": 1}},
		// 0.1·10,000/4,000.
		{"a tenth to V100", []Restriction{v100}, holes, map[string]float64{"V100-SXM2-32GB": 0.25}},
		// Half may use the 8,000 units off T4: 0.5·10,000/8,000 each.
		{"half anything but T4", []Restriction{notT4, v100}, holes, map[string]float64{"V100-SXM2-32GB": 0.625 + 0.25, "A100-SXM4-80GB": 0.625}},
		{"a model without free memory costs nothing", []Restriction{t4},
			&Holes{FreeUnits: 10000, FreeByModel: map[string]int64{"Tesla T4": 0, "A100-SXM4-80GB": 10000}}, nil},
		{"cards of unknown model take no restricted pod", []Restriction{{ExcludedModels: []string{"H100*"}, Share: 0.5}},
			&Holes{FreeUnits: 1000, FreeByModel: map[string]int64{"": 500, "A10": 500}}, map[string]float64{"A10": 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := ModelCosts(tc.rs, tc.holes)
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateApprox(0, 1e-12)); diff != "" {
				t.Errorf("ModelCosts (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFragAwareKeepsRestrictedModels: with pods restricted to T4s in the
// workload, a pod that may go anywhere goes to the A100 node rather than
// take the T4 memory they need, where it would otherwise prefer the T4
// node; a T4-only pod still goes to a T4 node and pays nothing for it.
func TestFragAwareKeepsRestrictedModels(t *testing.T) {
	typical := []Shape{{Units: 500, Cards: 1, Weight: 1}}
	// The T4 node is the busier one: packing prefers it.
	t4 := modelNode("t4", "Tesla T4", 1000, 500, 0)
	a100 := modelNode("a100", "A100-SXM4-80GB", 1000, 0, 0)
	holes := holesOf(t4, a100)
	onlyT4 := &gpushare.CardConstraints{Models: []string{"Tesla T4"}}
	d := gpushare.Demand{app("c", 500)}

	plain := NewFragAware(typical, holes)
	if got, _ := pick(t, plain, d, nil, t4, a100); got != "t4" {
		t.Fatalf("without restrictions the pod goes to %q; the test needs a policy that prefers t4", got)
	}

	// Half of recent memory restricted to T4s.
	costs := ModelCosts([]Restriction{{Models: onlyT4.Models, Share: 0.5}}, holes)
	if costs["Tesla T4"] <= 0 || costs["A100-SXM4-80GB"] != 0 {
		t.Fatalf("ModelCosts = %v, want a cost on T4 only", costs)
	}
	anywhere := NewFragAware(typical, holes)
	anywhere.SetModels(costs, nil)
	if got, _ := pick(t, anywhere, d, nil, t4, a100); got != "a100" {
		t.Errorf("a pod that may go anywhere goes to %q, want a100", got)
	}

	restricted := NewFragAware(typical, holes)
	restricted.SetModels(costs, onlyT4)
	pl, err := Fit(t4, d, restricted)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := restricted.NodeScore(t4, pl), plain.NodeScore(t4, pl); math.Abs(got-want) > 1e-9 {
		t.Errorf("a T4-only pod's score on t4 = %v, want %v as without the model term", got, want)
	}
}

// TestSetModelsFloor: the floor is the least cost among the models the
// pod may use that have free memory, 0 for a model none is restricted to.
func TestSetModelsFloor(t *testing.T) {
	holes := &Holes{FreeUnits: 300, FreeByModel: map[string]int64{"T4": 100, "V100": 100, "A100": 100, "": 50, "H100": 0}}
	costs := map[string]float64{"T4": 1, "V100": 0.4}
	tests := []struct {
		name      string
		cc        *gpushare.CardConstraints
		wantFloor float64
		wantOn    bool
	}{
		{"anywhere: A100 costs nothing", nil, 0, true},
		{"T4 or V100", &gpushare.CardConstraints{Models: []string{"T4", "V100"}}, 0.4, true},
		{"T4 only", &gpushare.CardConstraints{Models: []string{"T4"}}, 1, true},
		{"UUIDs only: anywhere", &gpushare.CardConstraints{UUIDs: []string{"GPU-1"}}, 0, true},
		{"only a model with no free memory: no term", &gpushare.CardConstraints{Models: []string{"H100"}}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFragAware(nil, holes)
			f.SetModels(costs, tc.cc)
			if got := f.modelCost != nil; got != tc.wantOn {
				t.Fatalf("model term on = %v, want %v", got, tc.wantOn)
			}
			if f.modelFloor != tc.wantFloor {
				t.Errorf("floor = %v, want %v", f.modelFloor, tc.wantFloor)
			}
		})
	}
}
