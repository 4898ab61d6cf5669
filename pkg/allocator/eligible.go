package allocator

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Exclusion says why a pod's containers may not use a card, beyond its
// health and free memory; Eligible when they may. The values are ordered
// as filter reasons list them among equal counts.
type Exclusion uint8

const (
	// Eligible: nothing keeps the pod off the card.
	Eligible Exclusion = iota
	// ExcludedCordoned: the operator cordoned the card (node annotation
	// gpushare.io/cordoned-gpus); no new pod may use it.
	ExcludedCordoned
	// ExcludedModelUnknown: the pod names models and the card's is unknown
	// (a node without an inventory).
	ExcludedModelUnknown
	// ExcludedModel: the card's model matches none of the pod's
	// gpushare.io/gpu-models.
	ExcludedModel
	// ExcludedModelExcluded: the card's model matches one of the pod's
	// gpushare.io/gpu-models-excluded.
	ExcludedModelExcluded
	// ExcludedUUIDUnknown: the pod names UUIDs and the card's is unknown.
	ExcludedUUIDUnknown
	// ExcludedUUID: the card's UUID is not among the pod's gpushare.io/gpu-uuids.
	ExcludedUUID
	// ExcludedUUIDExcluded: the card's UUID is among the pod's
	// gpushare.io/gpu-uuids-excluded.
	ExcludedUUIDExcluded
)

// Exclude is the predicate "may a container of a pod with constraints cc
// (nil: none) use card c", for every caller that places or relocates a
// container: Fit, the simulator and the device plugin. A pod's annotations
// apply to all its containers alike, so the answer is the pod's. It looks
// at the card's identity and the operator's cordon, not at its health or
// free memory (Card.Free does). For a pod without constraints it only
// reads Cordoned; it never allocates.
func Exclude(cc *gpushare.CardConstraints, c *Card) Exclusion {
	switch {
	case c.Cordoned:
		return ExcludedCordoned
	case cc == nil:
		return Eligible
	}
	if cc.ReadsModel() {
		if c.Model == "" {
			return ExcludedModelUnknown
		}
		if ok, by := cc.AllowsModel(c.Model); !ok {
			if by != "" {
				return ExcludedModelExcluded
			}
			return ExcludedModel
		}
	}
	if cc.ReadsUUID() {
		switch {
		case c.UUID == "":
			return ExcludedUUIDUnknown
		case len(cc.UUIDs) > 0 && !slices.Contains(cc.UUIDs, c.UUID):
			return ExcludedUUID
		case slices.Contains(cc.ExcludedUUIDs, c.UUID):
			return ExcludedUUIDExcluded
		}
	}
	return Eligible
}

// describe says why x keeps a pod with constraints cc off card c, as a
// filter reason counts it: "model Tesla T4 not A100*|H100*".
func (x Exclusion) describe(cc *gpushare.CardConstraints, c *Card) string {
	switch x {
	case ExcludedCordoned:
		return "cordoned by the operator"
	case ExcludedModelUnknown:
		return "model unknown"
	case ExcludedModel:
		return "model " + c.Model + " not " + strings.Join(cc.Models, "|")
	case ExcludedModelExcluded:
		_, by := cc.AllowsModel(c.Model)
		return "model " + c.Model + " excluded by the pod (" + by + ")"
	case ExcludedUUIDUnknown:
		return "UUID unknown"
	case ExcludedUUID:
		return "UUID not chosen by the pod"
	case ExcludedUUIDExcluded:
		return "UUID excluded by the pod"
	}
	return "eligible"
}

// exclusions counts the cards of n that a pod with constraints cc may not
// use, by reason.
type exclusions struct {
	total int
	// reasons in the order they are listed: most cards first.
	reasons []exclusionCount
}

type exclusionCount struct {
	x    Exclusion
	text string
	n    int
}

// excludedCards counts n's cards that Exclude keeps a pod with constraints
// cc off. It is for explanations: it allocates.
func excludedCards(n *Node, cc *gpushare.CardConstraints) exclusions {
	var ex exclusions
	for i := range n.Cards {
		c := &n.Cards[i]
		x := Exclude(cc, c)
		if x == Eligible {
			continue
		}
		ex.total++
		text := x.describe(cc, c)
		if j := slices.IndexFunc(ex.reasons, func(r exclusionCount) bool { return r.text == text }); j >= 0 {
			ex.reasons[j].n++
			continue
		}
		ex.reasons = append(ex.reasons, exclusionCount{x: x, text: text, n: 1})
	}
	slices.SortStableFunc(ex.reasons, func(a, b exclusionCount) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.x, b.x), strings.Compare(a.text, b.text))
	})
	return ex
}

// String lists the counts: "4 GPUs excluded (model Tesla T4 not A100*: 2,
// cordoned by the operator: 1, UUID excluded by the pod: 1)"; with all
// cards gone, "all 4 GPUs excluded (...)".
func (ex exclusions) String(cards int) string {
	parts := make([]string, len(ex.reasons))
	for i, r := range ex.reasons {
		parts[i] = r.text + ": " + strconv.Itoa(r.n)
	}
	head := fmt.Sprintf("%d %s excluded", ex.total, plural(ex.total, "GPU", "GPUs"))
	if ex.total == cards {
		head = fmt.Sprintf("all %d %s excluded", cards, plural(cards, "GPU", "GPUs"))
		if cards == 1 {
			head = "its only GPU excluded"
		}
	}
	return head + " (" + strings.Join(parts, ", ") + ")"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
