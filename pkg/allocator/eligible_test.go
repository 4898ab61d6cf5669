package allocator

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

func TestExclude(t *testing.T) {
	t4 := Card{Healthy: true, Info: &CardInfo{UUID: "GPU-t4", Model: "Tesla T4"}}
	a100 := Card{Healthy: true, Info: &CardInfo{UUID: "GPU-a100", Model: "A100-SXM4-80GB"}}
	unknown := Card{Healthy: true} // a node without an inventory
	cordoned := a100
	cordoned.Cordoned = true
	tests := []struct {
		name string
		cc   *gpushare.CardConstraints
		card Card
		want Exclusion
	}{
		{"no constraints", nil, t4, Eligible},
		{"no constraints, unknown card", nil, unknown, Eligible},
		{"no constraints, cordoned", nil, cordoned, ExcludedCordoned},
		{"model pattern matches", &gpushare.CardConstraints{Models: []string{"A100*"}}, a100, Eligible},
		{"model pattern does not match", &gpushare.CardConstraints{Models: []string{"A100*"}}, t4, ExcludedModel},
		{"hyphen matches the space NVML writes", &gpushare.CardConstraints{Models: []string{"Tesla-T4"}}, t4, Eligible},
		{"one of several models", &gpushare.CardConstraints{Models: []string{"H100*", "Tesla*"}}, t4, Eligible},
		{"cordon wins over a matching model", &gpushare.CardConstraints{Models: []string{"A100*"}}, cordoned, ExcludedCordoned},
		{"model excluded", &gpushare.CardConstraints{ExcludedModels: []string{"*T4"}}, t4, ExcludedModelExcluded},
		{"model allowed, then excluded", &gpushare.CardConstraints{Models: []string{"A100*"}, ExcludedModels: []string{"*80GB"}}, a100, ExcludedModelExcluded},
		{"model asked, unknown", &gpushare.CardConstraints{Models: []string{"*"}}, unknown, ExcludedModelUnknown},
		{"model excluded, unknown: it may be that model", &gpushare.CardConstraints{ExcludedModels: []string{"T4"}}, unknown, ExcludedModelUnknown},
		{"UUID chosen", &gpushare.CardConstraints{UUIDs: []string{"GPU-x", "GPU-t4"}}, t4, Eligible},
		{"UUID not chosen", &gpushare.CardConstraints{UUIDs: []string{"GPU-x"}}, t4, ExcludedUUID},
		{"UUID excluded", &gpushare.CardConstraints{ExcludedUUIDs: []string{"GPU-t4"}}, t4, ExcludedUUIDExcluded},
		{"other UUID excluded", &gpushare.CardConstraints{ExcludedUUIDs: []string{"GPU-x"}}, t4, Eligible},
		{"UUID excluded, unknown", &gpushare.CardConstraints{ExcludedUUIDs: []string{"GPU-x"}}, unknown, ExcludedUUIDUnknown},
		{"model checked before UUID", &gpushare.CardConstraints{Models: []string{"A100*"}, ExcludedUUIDs: []string{"GPU-t4"}}, t4, ExcludedModel},
		{"enforced asked, card advisory", &gpushare.CardConstraints{Enforced: true}, withIsolation(t4, gpushare.IsolationNone), ExcludedNotEnforced},
		{"enforced asked, card isolation unknown", &gpushare.CardConstraints{Enforced: true}, t4, ExcludedNotEnforced},
		{"enforced asked, card unknown", &gpushare.CardConstraints{Enforced: true}, unknown, ExcludedNotEnforced},
		{"enforced asked, driver card", &gpushare.CardConstraints{Enforced: true}, withIsolation(t4, gpushare.IsolationDriver), Eligible},
		{"enforced asked, mps card", &gpushare.CardConstraints{Enforced: true}, withIsolation(a100, gpushare.IsolationMPS), Eligible},
		{"enforcing card cordoned", &gpushare.CardConstraints{Enforced: true}, withIsolation(cordoned, gpushare.IsolationDriver), ExcludedCordoned},
		{"enforced across cards, mps card", &gpushare.CardConstraints{Enforced: true, EnforcedAcrossCards: true}, withIsolation(a100, gpushare.IsolationMPS), ExcludedNotEnforcedAcrossCards},
		{"enforced across cards, driver card", &gpushare.CardConstraints{Enforced: true, EnforcedAcrossCards: true}, withIsolation(a100, gpushare.IsolationDriver), Eligible},
		{"enforced across cards, advisory card", &gpushare.CardConstraints{Enforced: true, EnforcedAcrossCards: true}, withIsolation(t4, gpushare.IsolationNone), ExcludedNotEnforced},
		{"model checked before isolation", &gpushare.CardConstraints{Models: []string{"A100*"}, Enforced: true}, t4, ExcludedModel},
		{"advisory card, pod does not ask", &gpushare.CardConstraints{Models: []string{"Tesla*"}}, withIsolation(t4, gpushare.IsolationNone), Eligible},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Exclude(tc.cc, &tc.card); got != tc.want {
				t.Errorf("Exclude() = %v, want %v", got, tc.want)
			}
		})
	}
}

func withIsolation(c Card, m gpushare.Isolation) Card {
	info := CardInfo{}
	if c.Info != nil {
		info = *c.Info
	}
	info.Isolation = m
	c.Info = &info
	return c
}

// mixed is a node with two T4s (one cordoned), an A100 with 7 GiB free
// and an unhealthy A100.
func mixed() *Node {
	return &Node{Name: "n1", Unit: "GiB", Cards: []Card{
		{Index: 0, Total: 16, Healthy: true, Info: &CardInfo{UUID: "GPU-0", Model: "Tesla T4"}},
		{Index: 1, Total: 16, Healthy: true, Cordoned: true, Info: &CardInfo{UUID: "GPU-1", Model: "Tesla T4"}},
		{Index: 2, Total: 80, Used: 73, Healthy: true, Info: &CardInfo{UUID: "GPU-2", Model: "A100-SXM4-80GB"}},
		{Index: 3, Total: 80, Healthy: true, Info: &CardInfo{UUID: "GPU-3", Model: "A100-SXM4-80GB"}},
	}}
}

// cordon marks the cards at positions cordoned.
func cordon(n *Node, positions ...int) *Node {
	for _, p := range positions {
		n.Cards[p].Cordoned = true
	}
	return n
}

func TestFitWithExclusions(t *testing.T) {
	a100 := &gpushare.CardConstraints{Models: []string{"A100*"}}
	tests := []struct {
		name    string
		node    *Node
		demand  gpushare.Demand
		cc      *gpushare.CardConstraints
		want    [][]int
		wantErr string
	}{
		{
			name:   "binpack's best fit is a T4, but the pod asks an A100",
			node:   mixed(),
			demand: gpushare.Demand{app("c0", 6)},
			cc:     a100,
			want:   [][]int{{2}},
		},
		{
			name:   "a cordoned card takes no pod, constraints or not",
			node:   cordon(node("16/0", "16/10"), 1),
			demand: gpushare.Demand{app("c0", 6)},
			want:   [][]int{{0}},
		},
		{
			name:    "every reason counted, the largest eligible card named",
			node:    mixed(),
			demand:  gpushare.Demand{app("c0", 12)},
			cc:      &gpushare.CardConstraints{Models: []string{"A100*"}, ExcludedUUIDs: []string{"GPU-3"}},
			wantErr: "node n1: container c0 needs 12 GiB on one GPU of model A100* and without UUID GPU-3; 3 GPUs excluded (cordoned by the operator: 1, model Tesla T4 not A100*: 1, UUID excluded by the pod: 1); largest free eligible GPU has 7 of 80 GiB",
		},
		{
			name:    "no eligible card at all",
			node:    mixed(),
			demand:  gpushare.Demand{app("c0", 4)},
			cc:      &gpushare.CardConstraints{Models: []string{"H100*"}},
			wantErr: "node n1: container c0 needs 4 GiB on one GPU of model H100*; all 4 GPUs excluded (model A100-SXM4-80GB not H100*: 2, cordoned by the operator: 1, model Tesla T4 not H100*: 1)",
		},
		{
			name:    "cordon alone names the eligible cards",
			node:    mixed(),
			demand:  gpushare.Demand{app("c0", 81)},
			wantErr: "node n1: container c0 needs 81 GiB on one GPU; 1 GPU excluded (cordoned by the operator: 1); largest free eligible GPU has 80 of 80 GiB",
		},
		{
			name: "enforced pod: advisory cards counted, the enforcing one used",
			node: &Node{Name: "n1", Unit: "GiB", Cards: []Card{
				{Index: 0, Total: 16, Healthy: true, Info: &CardInfo{Isolation: gpushare.IsolationNone}},
				{Index: 1, Total: 16, Healthy: true},
				{Index: 2, Total: 16, Used: 8, Healthy: true, Info: &CardInfo{Isolation: gpushare.IsolationMPS}},
			}},
			demand: gpushare.Demand{app("c0", 6)},
			cc:     &gpushare.CardConstraints{Enforced: true},
			want:   [][]int{{2}},
		},
		{
			name: "enforced pod on a node that enforces nothing",
			node: &Node{Name: "n1", Unit: "GiB", Cards: []Card{
				{Index: 0, Total: 16, Healthy: true, Info: &CardInfo{Isolation: gpushare.IsolationNone}},
				{Index: 1, Total: 16, Healthy: true, Info: &CardInfo{Isolation: gpushare.IsolationNone}},
			}},
			demand:  gpushare.Demand{app("c0", 6)},
			cc:      &gpushare.CardConstraints{Enforced: true},
			wantErr: "node n1: container c0 needs 6 GiB on one GPU enforcing memory limits; all 2 GPUs excluded (memory limits not enforced: 2)",
		},
		{
			// Each MPS daemon serves one card and a client talks to one
			// daemon, so only driver mode limits a container on two cards.
			name: "enforced pod with a two-card container: driver cards only",
			node: &Node{Name: "n1", Unit: "GiB", Cards: []Card{
				{Index: 0, Total: 16, Healthy: true, Info: &CardInfo{Isolation: gpushare.IsolationMPS}},
				{Index: 1, Total: 16, Healthy: true, Info: &CardInfo{Isolation: gpushare.IsolationDriver}},
				{Index: 2, Total: 16, Healthy: true, Info: &CardInfo{Isolation: gpushare.IsolationMPS}},
				{Index: 3, Total: 16, Healthy: true, Info: &CardInfo{Isolation: gpushare.IsolationDriver}},
			}},
			demand: gpushare.Demand{app("a", 4), {Name: "b", Units: 8, Cards: 2}},
			cc:     &gpushare.CardConstraints{Enforced: true},
			want:   [][]int{{1}, {1, 3}},
		},
		{
			name: "enforced pod with a two-card container on an MPS node",
			node: &Node{Name: "n1", Unit: "GiB", Cards: []Card{
				{Index: 0, Total: 16, Healthy: true, Info: &CardInfo{Isolation: gpushare.IsolationMPS}},
				{Index: 1, Total: 16, Healthy: true, Info: &CardInfo{Isolation: gpushare.IsolationMPS}},
			}},
			demand:  gpushare.Demand{{Name: "b", Units: 8, Cards: 2}},
			cc:      &gpushare.CardConstraints{Enforced: true},
			wantErr: "node n1: container b needs 8 GiB on each of 2 GPUs enforcing memory limits; all 2 GPUs excluded (memory limits not enforced across GPUs (mps): 2)",
		},
		{
			name:    "capacity fallback: models unknown",
			node:    &Node{Name: "n1", Unit: "GiB", Cards: []Card{{Index: 0, Total: 32, Healthy: true}}},
			demand:  gpushare.Demand{app("c0", 4)},
			cc:      a100,
			wantErr: "node n1: container c0 needs 4 GiB on one GPU of model A100*; its only GPU excluded (model unknown: 1)",
		},
		{
			name:    "multi-card container counts eligible cards",
			node:    mixed(),
			demand:  gpushare.Demand{{Name: "c0", Units: 8, Cards: 2}},
			cc:      a100,
			wantErr: "node n1: container c0 needs 8 GiB on each of 2 GPUs of model A100*; 2 GPUs excluded (cordoned by the operator: 1, model Tesla T4 not A100*: 1); 1 of 2 eligible healthy GPUs have that much free",
		},
		{
			name:   "multi-card container on eligible cards only",
			node:   node("16/0", "16/0", "16/0"),
			demand: gpushare.Demand{{Name: "c0", Units: 8, Cards: 2}},
			cc:     &gpushare.CardConstraints{ExcludedUUIDs: []string{"GPU-b"}},
			want:   [][]int{{0, 2}},
		},
		{
			name:    "containers together need more than the eligible cards hold",
			node:    mixed(),
			demand:  gpushare.Demand{app("a", 8), app("b", 8), app("c", 8)},
			cc:      &gpushare.CardConstraints{ExcludedUUIDs: []string{"GPU-3"}},
			wantErr: "node n1: containers need 24 GiB in all; eligible GPUs have 23 GiB free; 2 GPUs excluded (cordoned by the operator: 1, UUID excluded by the pod: 1)",
		},
		{
			name:    "slices that do not fit together list only eligible cards",
			node:    node("16/8", "16/8", "16/0"),
			demand:  gpushare.Demand{app("a", 6), app("b", 6), app("c", 3)},
			cc:      &gpushare.CardConstraints{ExcludedUUIDs: []string{"GPU-c"}},
			wantErr: "node n1: the containers' slices (6+6+3 GiB) do not fit together on the free eligible cards (GPU0 8/16, GPU1 8/16 GiB free); 1 GPU excluded (UUID excluded by the pod: 1)",
		},
		{
			name:   "init container only on eligible cards",
			node:   node("16/0", "16/4"),
			demand: gpushare.Demand{{Name: "init", Init: true, Units: 8, Cards: 1}, app("c", 4)},
			cc:     &gpushare.CardConstraints{UUIDs: []string{"GPU-a"}},
			want:   [][]int{{0}, {0}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pl := &Placement{}
			err := FitWith(tc.node, tc.demand, tc.cc, Binpack{}, pl)
			if tc.wantErr != "" {
				var fe *FitError
				if !errors.As(err, &fe) {
					t.Fatalf("FitWith() error = %v, want FitError %q", err, tc.wantErr)
				}
				if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
					t.Errorf("FitWith() error (-want +got):\n%s", diff)
				}
				return
			}
			if err != nil {
				t.Fatalf("FitWith() error = %v", err)
			}
			if diff := cmp.Diff(tc.want, pl.Cards); diff != "" {
				t.Errorf("FitWith() cards (-want +got):\n%s", diff)
			}
			checkPlacement(t, tc.node, tc.demand, pl)
		})
	}
}
