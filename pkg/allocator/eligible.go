package allocator

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Exclusion says why a pod's containers may not use a card, beyond its
// health and free memory. It is Eligible when they may. The values are
// ordered as filter reasons list them among equal counts.
type Exclusion uint8

const (
	// Eligible: nothing keeps the pod off the card.
	Eligible Exclusion = iota
	// ExcludedCordoned: the operator cordoned the card (node annotation
	// gpushare.io/cordoned-gpus). No new pod may use it.
	ExcludedCordoned
	// ExcludedMPSUser: the card is in mps mode and its clients run as
	// another Linux user (Card.ForeignMPS).
	ExcludedMPSUser
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
	// ExcludedNotEnforced: the pod asks gpushare.io/isolation: enforced, and
	// the card's isolation, from its inventory, does not enforce memory limits.
	ExcludedNotEnforced
	// ExcludedNotEnforcedAcrossCards: the pod asks enforced limits and has
	// a container on several cards, which only driver mode limits. The card
	// is in mps mode (gpushare.CardConstraints.EnforcedAcrossCards).
	ExcludedNotEnforcedAcrossCards
)

// Exclude is the predicate "may a container of a pod with constraints cc
// use card c"; a nil cc is no constraint. Every caller that places or
// relocates a container asks it: Fit, the simulator and the device plugin.
// A pod's annotations apply to all its containers alike, so the answer is
// the pod's. It looks at the card's identity, isolation and the operator's
// cordon. It does not look at the card's health or free memory, which
// Card.Free does. For a pod without constraints it only reads Cordoned and
// ForeignMPS. It never allocates.
func Exclude(cc *gpushare.CardConstraints, c *Card) Exclusion {
	switch {
	case c.Cordoned:
		return ExcludedCordoned
	case c.ForeignMPS:
		return ExcludedMPSUser
	case cc == nil:
		return Eligible
	}
	if cc.ReadsModel() {
		if c.Model() == "" {
			return ExcludedModelUnknown
		}
		if ok, by := cc.AllowsModel(c.Model()); !ok {
			if by != "" {
				return ExcludedModelExcluded
			}
			return ExcludedModel
		}
	}
	if cc.ReadsUUID() {
		switch {
		case c.UUID() == "":
			return ExcludedUUIDUnknown
		case len(cc.UUIDs) > 0 && !slices.Contains(cc.UUIDs, c.UUID()):
			return ExcludedUUID
		case slices.Contains(cc.ExcludedUUIDs, c.UUID()):
			return ExcludedUUIDExcluded
		}
	}
	if cc.Enforced && !c.Isolation().Enforced() {
		return ExcludedNotEnforced
	}
	if cc.EnforcedAcrossCards && c.Isolation() != gpushare.IsolationDriver {
		return ExcludedNotEnforcedAcrossCards
	}
	return Eligible
}

// exclusions holds Exclude's answers for one pod, parallel to a node's
// cards. It is nil when every card is eligible. That is the usual case, and
// it then costs no allocation.
type exclusions []Exclusion

// cardExclusions returns Exclude's answers for a pod with constraints cc on
// n's cards, nil when all are Eligible.
func cardExclusions(n *Node, cc *gpushare.CardConstraints) exclusions {
	for i := range n.Cards {
		if Exclude(cc, &n.Cards[i]) == Eligible {
			continue
		}
		xs := make(exclusions, len(n.Cards))
		for j := i; j < len(n.Cards); j++ {
			xs[j] = Exclude(cc, &n.Cards[j])
		}
		return xs
	}
	return nil
}

// eligible reports whether the card at position pos is eligible.
func (xs exclusions) eligible(pos int) bool { return xs == nil || xs[pos] == Eligible }

// count returns the number of cards excluded.
func (xs exclusions) count() int {
	n := 0
	for _, x := range xs {
		if x != Eligible {
			n++
		}
	}
	return n
}

// appendExclusions appends to b the count of n's cards that xs, the
// exclusions of a pod with constraints cc, excludes. It counts them by
// reason, most cards first: "4 GPUs excluded (model Tesla T4 not A100*: 2,
// cordoned by the operator: 1, UUID excluded by the pod: 1)". With every
// card excluded it says "all 4 GPUs excluded (...)". total is the number
// excluded, at least 1. It runs for every node a filter rejects, so it
// builds the text in b without fmt.
func appendExclusions(b []byte, n *Node, cc *gpushare.CardConstraints, xs exclusions, total int) []byte {
	// Cards excluded for the same reason share a group. Where the text
	// names the model, they also share the model.
	type group struct {
		x     Exclusion
		model string
		n     int
	}
	var buf [8]group
	groups := buf[:0]
	for i, x := range xs {
		if x == Eligible {
			continue
		}
		model := ""
		if x == ExcludedModel || x == ExcludedModelExcluded {
			model = n.Cards[i].Model()
		}
		j := 0
		for j < len(groups) && (groups[j].x != x || groups[j].model != model) {
			j++
		}
		if j == len(groups) {
			groups = append(groups, group{x: x, model: model})
		}
		groups[j].n++
	}
	slices.SortFunc(groups, func(a, b group) int {
		return cmp.Or(cmp.Compare(b.n, a.n), cmp.Compare(a.x, b.x), strings.Compare(a.model, b.model))
	})
	cards := len(n.Cards)
	switch {
	case total == cards && cards == 1:
		b = append(b, "its only GPU excluded ("...)
	case total == cards:
		b = append(b, "all "...)
		b = strconv.AppendInt(b, int64(cards), 10)
		b = append(b, " GPUs excluded ("...)
	default:
		b = strconv.AppendInt(b, int64(total), 10)
		b = append(b, plural(total, " GPU", " GPUs")...)
		b = append(b, " excluded ("...)
	}
	for i, g := range groups {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = appendReason(b, g.x, g.model, cc)
		b = append(b, ": "...)
		b = strconv.AppendInt(b, int64(g.n), 10)
	}
	return append(b, ')')
}

// appendReason appends why x keeps a pod with constraints cc off a card of
// model: "model Tesla T4 not A100*|H100*".
func appendReason(b []byte, x Exclusion, model string, cc *gpushare.CardConstraints) []byte {
	switch x {
	case ExcludedCordoned:
		return append(b, "cordoned by the operator"...)
	case ExcludedMPSUser:
		return append(b, "MPS clients of another Linux user"...)
	case ExcludedModelUnknown:
		return append(b, "model unknown"...)
	case ExcludedModel:
		b = append(append(append(b, "model "...), model...), " not "...)
		for i, p := range cc.Models {
			if i > 0 {
				b = append(b, '|')
			}
			b = append(b, p...)
		}
		return b
	case ExcludedModelExcluded:
		_, by := cc.AllowsModel(model)
		return append(append(append(append(b, "model "...), model...), " matches excluded "...), by...)
	case ExcludedUUIDUnknown:
		return append(b, "UUID unknown"...)
	case ExcludedUUID:
		return append(b, "UUID not chosen by the pod"...)
	case ExcludedUUIDExcluded:
		return append(b, "UUID excluded by the pod"...)
	case ExcludedNotEnforced:
		return append(b, "memory limits not enforced"...)
	case ExcludedNotEnforcedAcrossCards:
		return append(b, "memory limits not enforced across GPUs (mps)"...)
	}
	return append(b, "eligible"...)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
