package handoff

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// TestHandoffRelocatesOnlyToAllowedCards: when kubelet's free devices force
// a container off its annotated card, the plugin moves it only to a card
// its pod's gpushare.io/gpu-* annotations allow, and otherwise fails the
// admission saying why.
func TestHandoffRelocatesOnlyToAllowedCards(t *testing.T) {
	t.Run("best fit would be a card the pod excludes", func(t *testing.T) {
		ht := newHandoffTest(t)
		ht.take(unitsOn("GPU-0", 0, 14)) // card 0 has 2 free units
		p := ht.pod(util.MakePod("p").GPUMem(4).Annotation(gpushare.AnnotationGPUUUIDsExcluded, "GPU-1"), map[string][]int{"c0": {0}}, 1)
		a, _ := ht.admit(4)
		// Best fit is card 1 (16 free, like card 0 when empty); the pod
		// excludes it: card 2.
		if a.Pod != p.UID || !a.Relocated || cmp.Diff([]int{2}, cardIndexes(a.Shares)) != "" {
			t.Fatalf("assignment %+v, want p relocated to card 2", a)
		}
	})
	t.Run("an enforced pod moves only to a card that enforces memory limits", func(t *testing.T) {
		ht := newHandoffTest(t)
		cards := slices.Clone(testCards)
		cards[0].Isolation, cards[1].Isolation, cards[2].Isolation = gpushare.IsolationDriver, gpushare.IsolationNone, gpushare.IsolationMPS
		ht.h = New(Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: cards, Kubelet: ht.kubelet, Clock: ht.clock})
		ht.take(unitsOn("GPU-0", 0, 14)) // card 0 has 2 free units
		p := ht.pod(util.MakePod("p").GPUMem(4).Enforced(), map[string][]int{"c0": {0}}, 1)
		a, _ := ht.admit(4)
		// Best fit is card 1, which enforces nothing: card 2.
		if a.Pod != p.UID || !a.Relocated || cmp.Diff([]int{2}, cardIndexes(a.Shares)) != "" {
			t.Fatalf("assignment %+v, want p relocated to card 2", a)
		}
	})
	t.Run("no allowed card has room", func(t *testing.T) {
		ht := newHandoffTest(t)
		ht.take(unitsOn("GPU-2", 0, 78)) // the A100 has 2 free units
		ht.pod(util.MakePod("p").GPUMem(4).GPUModels("A100*"), map[string][]int{"c0": {2}}, 1)
		_, err := ht.h.Prefer(ht.ctx, ht.available(), nil, 4)
		want := "pod default/p container c0 needs 4 units on each of 1 cards of model A100* and no such cards are free in kubelet's accounting " +
			"(free units by card: card 0: 16, card 1: 16, card 2: 2); the pod's card annotations exclude card 0 (T4), card 1 (T4)"
		if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), want) {
			t.Fatalf("Prefer error = %v, want ErrNoMatch containing %q", err, want)
		}
	})
	t.Run("invalid annotations: no relocation", func(t *testing.T) {
		ht := newHandoffTest(t)
		ht.take(unitsOn("GPU-0", 0, 14))
		ht.pod(util.MakePod("p").GPUMem(4).GPUModels(""), map[string][]int{"c0": {0}}, 1)
		_, err := ht.h.Prefer(ht.ctx, ht.available(), nil, 4)
		want := "pod default/p container c0 needs 4 units on each of 1 cards other than its annotation's, and its card annotations are invalid, so no card may take it: " +
			"invalid gpushare annotation gpushare.io/gpu-models is empty"
		if !errors.Is(err, ErrNoMatch) || !errors.Is(err, gpushare.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Fatalf("Prefer error = %v, want ErrNoMatch and ErrInvalid containing %q", err, want)
		}
	})
	t.Run("invalid annotations: the annotated card still serves", func(t *testing.T) {
		ht := newHandoffTest(t)
		p := ht.pod(util.MakePod("p").GPUMem(4).GPUModels(""), map[string][]int{"c0": {0}}, 1)
		if a, _ := ht.admit(4); a.Pod != p.UID || a.Relocated {
			t.Fatalf("assignment %+v, want p on its annotated card", a)
		}
	})
	t.Run("kubelet's IDs without a preference, on an excluded card", func(t *testing.T) {
		ht := newHandoffTest(t)
		ht.pod(util.MakePod("p").GPUMem(4).GPUModels("A100*"), map[string][]int{"c0": {2}}, 1)
		_, err := ht.h.Allocate(ht.ctx, unitsOn("GPU-0", 0, 4))
		want := "kubelet allocated 4 units on card 0: 4 for pod default/p container c0, which asks cards of model A100*; the pod's card annotations exclude card 0 (T4), card 1 (T4)"
		if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), want) {
			t.Fatalf("Allocate error = %v, want ErrNoMatch containing %q", err, want)
		}
	})
	t.Run("kubelet's IDs without a preference go to the pod that allows them", func(t *testing.T) {
		ht := newHandoffTest(t)
		ht.pod(util.MakePod("a100").GPUMem(4).GPUModels("A100*"), map[string][]int{"c0": {2}}, 1) // older: tried first
		anyPod := ht.pod(util.MakePod("any").GPUMem(4), map[string][]int{"c0": {1}}, 2)
		a, err := ht.h.Allocate(ht.ctx, unitsOn("GPU-0", 0, 4))
		if err != nil {
			t.Fatal(err)
		}
		if a.Pod != anyPod.UID || !a.Relocated {
			t.Fatalf("assignment %+v, want pod any relocated to card 0", a)
		}
	})
}
