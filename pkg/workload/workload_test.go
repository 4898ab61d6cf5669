package workload

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

func app(name string, units int64) gpushare.ContainerDemand {
	return gpushare.ContainerDemand{Name: name, Units: units, Cards: 1}
}

func TestWorkloadTypical(t *testing.T) {
	w := New()
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

func TestWorkloadCPUPerUnit(t *testing.T) {
	const d = workloadDecay
	gpu := func(units int64) gpushare.Demand { return gpushare.Demand{{Units: units, Cards: 1}} }
	tests := []struct {
		name    string
		observe func(w *Workload)
		want    float64 // millicores per unit
	}{
		{"nothing seen", func(*Workload) {}, 0},
		{"only pods without GPU memory: no unit to share", func(w *Workload) { w.ObserveCPUOnly(4000) }, 0},
		{"one GPU pod", func(w *Workload) { w.ObservePod(gpu(1000), 10000, 0) }, 10},
		// The doc's example, with the decay: the GPU pod is one pod old.
		{"doc: a GPU pod, then 4 cores without GPU memory", func(w *Workload) {
			w.ObservePod(gpu(1000), 10000, 0)
			w.ObserveCPUOnly(4000)
		}, (10000*d + 4000) / (1000 * d)},
		{"a GPU pod that asks no CPU still brings memory", func(w *Workload) {
			w.ObservePod(gpu(500), 0, 0)
			w.ObservePod(gpu(500), 6000, 0)
		}, 6000 / (500*d + 500)},
		{"a two-card pod counts both cards", func(w *Workload) {
			w.ObservePod(gpushare.Demand{{Units: 1000, Cards: 2}}, 16000, 0)
		}, 8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := New()
			tc.observe(w)
			if diff := cmp.Diff(tc.want, w.CPUPerUnit(), cmpopts.EquateApprox(1e-12, 0)); diff != "" {
				t.Errorf("CPUPerUnit (-want +got):\n%s", diff)
			}
		})
	}
}

// TestWorkloadRestrictions: a restriction's share is its pods' part of
// the GPU memory recent pods asked, decaying as the typical requests do;
// pods of the same models share one restriction.
func TestWorkloadRestrictions(t *testing.T) {
	w := New()
	if got := w.Restrictions(); got != nil {
		t.Fatalf("Restrictions of an empty workload = %v, want nil", got)
	}
	t4 := &gpushare.CardConstraints{Models: []string{"T4"}}
	w.ObserveConstrained(gpushare.Demand{app("c", 300)}, t4, 0, 0)
	w.ObserveConstrained(gpushare.Demand{app("c", 100)}, &gpushare.CardConstraints{Models: []string{"T4"}}, 0, 0)
	w.ObserveConstrained(gpushare.Demand{app("c", 600)}, &gpushare.CardConstraints{UUIDs: []string{"GPU-1"}}, 0, 0) // no model
	w.ObserveCPUOnly(4000)
	d := workloadDecay
	// T4: 300 decayed three times and 100 twice, over all 1,000 units so decayed.
	wantT4 := (300*d*d*d + 100*d*d) / (300*d*d*d + 100*d*d + 600*d)
	want := []allocator.Restriction{{Models: []string{"T4"}, Share: wantT4}}
	if diff := cmp.Diff(want, w.Restrictions(), cmpopts.EquateApprox(0, 1e-12), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("Restrictions (-want +got):\n%s", diff)
	}
}
