package soak

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// opSummary is what a step decides, comparable.
type opSummary struct {
	Create, Delete string
	Units          int64
	Wait           time.Duration
}

func TestWorkloadReplaysAndStaysInBounds(t *testing.T) {
	const maxPods, maxUnits, maxTwoCard = 10, 60, 2
	run := func(seed uint64) ([]opSummary, map[Shape]int) {
		w := NewWorkload(seed, "soak", Bounds{Pods: maxPods, Units: maxUnits, TwoCard: maxTwoCard}, time.Second)
		var ops []opSummary
		shapes := map[Shape]int{}
		live := map[string]int64{}
		var units int64
		twoCard := map[string]bool{}
		for range 500 {
			op := w.Next()
			s := opSummary{Delete: op.Delete, Units: op.Units, Wait: op.Wait}
			switch {
			case op.Create != nil:
				s.Create = op.Create.Name
				shapes[op.Shape]++
				live[op.Create.Name] = op.Units
				units += op.Units
				if op.Shape == ShapeTwoCard {
					twoCard[op.Create.Name] = true
				}
				if op.Units != demand(op.Create) || op.Create.Namespace != "soak" {
					t.Fatalf("pod %s: units %d, namespace %q", op.Create.Name, op.Units, op.Create.Namespace)
				}
			case op.Delete != "":
				u, ok := live[op.Delete]
				if !ok {
					t.Fatalf("deletes %s, which is not live", op.Delete)
				}
				delete(live, op.Delete)
				delete(twoCard, op.Delete)
				units -= u
			}
			if len(live) > maxPods || units > maxUnits || len(twoCard) > maxTwoCard {
				t.Fatalf("%d live pods (%d two-card) asking %d GiB, bounds %d pods (%d two-card), %d GiB", len(live), len(twoCard), units, maxPods, maxTwoCard, maxUnits)
			}
			ops = append(ops, s)
		}
		if w.Created() != len(live)+countDeletes(ops) {
			t.Errorf("Created() = %d, want %d", w.Created(), len(live)+countDeletes(ops))
		}
		return ops, shapes
	}
	a, shapes := run(3)
	for _, s := range Shapes {
		if shapes[s] == 0 {
			t.Errorf("no pod of shape %s in 500 steps", s)
		}
	}
	b, _ := run(3)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("seed 3 gave other steps the second time (-first +second):\n%s", diff)
	}
}

func countDeletes(ops []opSummary) int {
	n := 0
	for _, o := range ops {
		if o.Delete != "" {
			n++
		}
	}
	return n
}
