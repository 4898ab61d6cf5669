package simulator

import (
	"context"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// TestStepperFollowsRun feeds a Stepper the pods of Run, in Run's order,
// and Run's choices: each must be one of the Stepper's best nodes, with the
// same cards.
func TestStepperFollowsRun(t *testing.T) {
	tr, err := trace.LoadTrace(sliceNodes, slicePods)
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{allocator.NameFragAware, allocator.NameFGD, allocator.NameBinpack} {
		t.Run(policy, func(t *testing.T) {
			opts := Options{Policy: policy, Seed: 3, Record: true}
			res, err := Run(context.Background(), tr, opts)
			if err != nil {
				t.Fatal(err)
			}
			order, err := Arrivals(tr, opts.Seed, DefaultInflate)
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewStepper(tr, opts)
			if err != nil {
				t.Fatal(err)
			}
			if len(order) != len(res.Decisions) {
				t.Fatalf("%d pods, %d decisions", len(order), len(res.Decisions))
			}
			ties := 0
			for k, idx := range order {
				d := res.Decisions[k]
				ch := s.Choices(&tr.Pods[idx])
				if d.Node == "" && len(ch.Best) > 0 || d.Node != "" && !slices.Contains(ch.Best, d.Node) {
					t.Fatalf("pod %d %s: Run chose %q, the Stepper's best are %v", k, d.Pod, d.Node, ch.Best)
				}
				if len(ch.Best) > 1 {
					ties++
				}
				cards, err := s.Place(d.Node)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(d.Cards, cards); diff != "" {
					t.Fatalf("pod %d %s on %s: cards (-Run +Stepper):\n%s", k, d.Pod, d.Node, diff)
				}
			}
			if ties == 0 {
				t.Error("no pod had a choice of nodes; the test exercises little")
			}
		})
	}
}

func TestStepperPlaceErrors(t *testing.T) {
	tr := tinyTrace(t, "a,8000,8192,1,T4\nb,8000,8192,1,T4\n", "g,4000,1024,1,800,\nh,6000,1024,1,800,\n")
	s, err := NewStepper(tr, Options{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Place("a"); err == nil {
		t.Error("Place before Choices accepted")
	}
	s.Choices(&tr.Pods[0])
	if _, err := s.Place("c"); err == nil {
		t.Error("an unknown node accepted")
	}
	s.Choices(&tr.Pods[0])
	if _, err := s.Place("a"); err != nil {
		t.Fatal(err)
	}
	s.Choices(&tr.Pods[1])
	if _, err := s.Place("a"); err == nil {
		t.Error("a pod accepted where its CPU does not fit")
	}
}
