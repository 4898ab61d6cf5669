package soak

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fakeTargets has n of every kind, each node with 4 cards.
func fakeTargets(n int) Targets {
	var t Targets
	for range n {
		t.Extenders = append(t.Extenders, nil)
		t.Schedulers = append(t.Schedulers, nil)
		t.Plugins = append(t.Plugins, nil)
		t.Kubelets = append(t.Kubelets, nil)
		t.APIServers = append(t.APIServers, nil)
		t.Cards = append(t.Cards, fourCards{})
	}
	return t
}

type fourCards struct{}

func (fourCards) Name() string                                { return "n" }
func (fourCards) Count() int                                  { return 4 }
func (fourCards) SetHealthy(context.Context, int, bool) error { return nil }

func TestPlannerDealsEveryKindAndReplays(t *testing.T) {
	const rounds = 4
	steps := func(seed uint64) []Step {
		p := NewPlanner(seed, fakeTargets(3), time.Second)
		var out []Step
		for range rounds * len(Kinds) {
			out = append(out, p.Next())
		}
		return out
	}
	a := steps(7)
	for r := range rounds {
		seen := map[Kind]int{}
		for _, s := range a[r*len(Kinds) : (r+1)*len(Kinds)] {
			seen[s.Kind]++
			h := holds[s.Kind]
			if s.Hold < h[0] || s.Hold >= h[1] || s.Gap < 0 || s.Gap > time.Second || s.Target < 0 || s.Target >= 3 || s.Card < 0 || s.Card >= 4 {
				t.Errorf("step %+v out of its ranges", s)
			}
		}
		for _, k := range Kinds {
			if seen[k] != 1 {
				t.Errorf("round %d dealt %s %d times, want once", r, k, seen[k])
			}
		}
	}
	if diff := cmp.Diff(a, steps(7)); diff != "" {
		t.Errorf("seed 7 gave other steps the second time (-first +second):\n%s", diff)
	}
	if cmp.Equal(a, steps(8)) {
		t.Error("seeds 7 and 8 gave the same steps")
	}
}

func TestPlannerSkipsKindsWithoutTargets(t *testing.T) {
	tg := fakeTargets(1)
	tg.Schedulers = nil
	p := NewPlanner(1, tg, time.Second)
	for range 50 {
		if s := p.Next(); s.Kind == KindSchedulerKill {
			t.Fatal("dealt a scheduler kill with no scheduler to kill")
		}
	}
}
