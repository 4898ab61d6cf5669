package gpushare

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Pod annotations that choose cards, and the node annotation that cordons
// them (docs/design/contract.md, "Choosing cards").
const (
	// AnnotationGPUModels (pod): the card models the pod may use, as model
	// patterns (MatchModel) separated by commas: "A100*,H100*".
	AnnotationGPUModels = "gpushare.io/gpu-models"
	// AnnotationGPUModelsExcluded (pod): model patterns the pod must not use.
	AnnotationGPUModelsExcluded = "gpushare.io/gpu-models-excluded"
	// AnnotationGPUUUIDs (pod): the only card UUIDs the pod may use, exact,
	// separated by commas.
	AnnotationGPUUUIDs = "gpushare.io/gpu-uuids"
	// AnnotationGPUUUIDsExcluded (pod): card UUIDs the pod must not use.
	AnnotationGPUUUIDsExcluded = "gpushare.io/gpu-uuids-excluded"
	// AnnotationCordonedGPUs (node, set by operators): UUIDs of cards that
	// take no new pods, separated by commas; pods already there keep them.
	AnnotationCordonedGPUs = "gpushare.io/cordoned-gpus"
)

// Bounds on each card list annotation. Every pattern is tried on every card
// of every node a filter request names, so a pod must not make the
// extender's filter match without bound.
const (
	MaxCardListBytes   = 4 << 10
	MaxCardListEntries = 32
)

// CardConstraints are what a pod's annotations say about the cards its
// containers may use; every container of the pod obeys them. A card's model
// must match one of Models, unless Models is empty, and none of
// ExcludedModels. Its UUID must be one of UUIDs, unless UUIDs is empty, and
// none of ExcludedUUIDs. On a node without an inventory the model and UUID
// are unknown: such a card is allowed only when no constraint reads them. A
// nil *CardConstraints allows every card.
type CardConstraints struct {
	// Models and ExcludedModels are model patterns (MatchModel).
	Models, ExcludedModels []string
	// UUIDs and ExcludedUUIDs are compared exactly.
	UUIDs, ExcludedUUIDs []string
	// Enforced, from AnnotationIsolation, allows only cards whose inventory
	// isolation enforces memory limits (Isolation.Enforced).
	Enforced bool
	// EnforcedAcrossCards narrows Enforced to cards in driver mode, for a
	// pod with a container on more than one card. MPS limits a client on one
	// card only: a daemon serves one card, and a client talks to one daemon.
	// No annotation sets it; ForDemand does.
	EnforcedAcrossCards bool
}

// ForDemand returns cc as it applies to a pod with demand d: a copy with
// EnforcedAcrossCards set when cc is Enforced and a container of d spans
// more than one card, else cc itself. The pod's containers share one set
// of constraints, so its single-card containers then keep to driver-mode
// cards too.
func (cc *CardConstraints) ForDemand(d Demand) *CardConstraints {
	if cc == nil || !cc.Enforced || cc.EnforcedAcrossCards {
		return cc
	}
	for _, c := range d {
		if c.Cards > 1 {
			across := *cc
			across.EnforcedAcrossCards = true
			return &across
		}
	}
	return cc
}

// ParseCardConstraints reads a pod's card annotations and its
// AnnotationIsolation; it returns nil and no error when the pod carries none.
// Each card value is a list separated by commas, spaces around an entry
// ignored. It fails, naming the annotation and what to fix, on an empty value
// or entry, a list over MaxCardListBytes or MaxCardListEntries, a UUID with a
// pattern character, a space or a comma, and a UUID both required and
// excluded.
func ParseCardConstraints(annotations map[string]string) (*CardConstraints, error) {
	var cc CardConstraints
	found := false
	for _, f := range []struct {
		key  string
		dst  *[]string
		uuid bool
	}{
		{AnnotationGPUModels, &cc.Models, false},
		{AnnotationGPUModelsExcluded, &cc.ExcludedModels, false},
		{AnnotationGPUUUIDs, &cc.UUIDs, true},
		{AnnotationGPUUUIDsExcluded, &cc.ExcludedUUIDs, true},
	} {
		s, ok := annotations[f.key]
		if !ok {
			continue
		}
		found = true
		list, err := parseCardList(f.key, s, f.uuid)
		if err != nil {
			return nil, err
		}
		if len(list) == 0 {
			what := "model"
			if f.uuid {
				what = "UUID"
			}
			return nil, fmt.Errorf("%w %s is empty; name at least one %s or remove the annotation", ErrInvalid, f.key, what)
		}
		*f.dst = list
	}
	if v, ok := annotations[AnnotationIsolation]; ok {
		if v != IsolationEnforced {
			return nil, fmt.Errorf("%w %s is %q; the only value is %q (or remove the annotation)", ErrInvalid, AnnotationIsolation, v, IsolationEnforced)
		}
		cc.Enforced, found = true, true
	}
	if !found {
		return nil, nil
	}
	for _, u := range cc.UUIDs {
		for _, x := range cc.ExcludedUUIDs {
			if u == x {
				return nil, fmt.Errorf("%w: UUID %s is in both %s and %s; keep it in one", ErrInvalid, u, AnnotationGPUUUIDs, AnnotationGPUUUIDsExcluded)
			}
		}
	}
	return &cc, nil
}

// ParseCordonedGPUs reads the node annotation AnnotationCordonedGPUs: the
// UUIDs it names (none for an empty value). It fails, naming what to fix,
// on the same errors as a UUID list of ParseCardConstraints.
func ParseCordonedGPUs(s string) ([]string, error) {
	return parseCardList(AnnotationCordonedGPUs, s, true)
}

// parseCardList splits the value s of annotation key at commas. With uuid,
// entries are UUIDs, without pattern characters or spaces.
func parseCardList(key, s string, uuid bool) ([]string, error) {
	if len(s) > MaxCardListBytes {
		return nil, fmt.Errorf("%w %s is %d bytes, limit %d", ErrInvalid, key, len(s), MaxCardListBytes)
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) > MaxCardListEntries {
		return nil, fmt.Errorf("%w %s has %d entries, limit %d", ErrInvalid, key, len(parts), MaxCardListEntries)
	}
	out := make([]string, 0, len(parts))
	for i, p := range parts {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
			return nil, fmt.Errorf("%w %s: entry %d of %q is empty; remove the extra comma", ErrInvalid, key, i+1, s)
		case !utf8.ValidString(p):
			return nil, fmt.Errorf("%w %s: entry %d is not valid UTF-8", ErrInvalid, key, i+1)
		case uuid && strings.ContainsAny(p, "*? \t\n"):
			return nil, fmt.Errorf("%w %s: %q is not a UUID; UUIDs are matched exactly, without patterns or spaces", ErrInvalid, key, p)
		}
		out = append(out, p)
	}
	return out, nil
}

// MatchModel reports whether a card model matches pattern. A pattern is the
// model's name, in which '*' stands for any run of characters, none
// included, and '?' for exactly one. Every other character stands for
// itself, case-sensitively, but a space and a hyphen match each other:
// NVML names cards "Tesla T4", and flags and YAML often write "Tesla-T4".
// Examples: "A100*" matches "A100-SXM4-80GB" but not
// "NVIDIA A100-SXM4-80GB", which "*A100*" matches; "Tesla-T4" matches
// "Tesla T4"; "a100*" matches neither; "A10" matches "A10" only.
func MatchModel(pattern, model string) bool {
	// Iterative matching with one backtrack point, the last '*': on a
	// mismatch the star swallows one more character of model.
	p, m := 0, 0
	star, resume := -1, 0
	for m < len(model) {
		if p < len(pattern) {
			switch c := pattern[p]; {
			case c == '*':
				star, resume = p, m
				p++
				continue
			case c == '?':
				_, w := utf8.DecodeRuneInString(model[m:])
				p, m = p+1, m+w
				continue
			case sameModelByte(c, model[m]):
				p, m = p+1, m+1
				continue
			}
		}
		if star < 0 {
			return false
		}
		_, w := utf8.DecodeRuneInString(model[resume:])
		resume += w
		p, m = star+1, resume
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

func sameModelByte(a, b byte) bool {
	return a == b || (a == ' ' || a == '-') && (b == ' ' || b == '-')
}

// AllowsModel reports whether a card of model, known and not "", may be
// used: it matches one of cc.Models, or there are none, and none of
// cc.ExcludedModels. excluded is the pattern that excluded it, "" when the
// card matched none of cc.Models.
func (cc *CardConstraints) AllowsModel(model string) (ok bool, excluded string) {
	if len(cc.Models) > 0 && !matchAny(cc.Models, model) {
		return false, ""
	}
	for _, x := range cc.ExcludedModels {
		if MatchModel(x, model) {
			return false, x
		}
	}
	return true, ""
}

func matchAny(patterns []string, model string) bool {
	for _, p := range patterns {
		if MatchModel(p, model) {
			return true
		}
	}
	return false
}

// ReadsModel reports whether a constraint concerns the card's model. A card
// whose model is unknown is then not allowed.
func (cc *CardConstraints) ReadsModel() bool { return len(cc.Models)+len(cc.ExcludedModels) > 0 }

// ReadsUUID reports whether a constraint concerns the card's UUID. A card
// whose UUID is unknown is then not allowed.
func (cc *CardConstraints) ReadsUUID() bool { return len(cc.UUIDs)+len(cc.ExcludedUUIDs) > 0 }

// String describes the cards cc allows, as messages put it after "a GPU":
// "of model A100*|H100* and without UUID GPU-3f1c and enforcing memory
// limits"; "" for nil.
func (cc *CardConstraints) String() string { return string(cc.AppendDescription(nil)) }

// AppendDescription appends String's text to b.
func (cc *CardConstraints) AppendDescription(b []byte) []byte {
	if cc == nil {
		return b
	}
	start := len(b)
	for _, part := range []struct {
		head string
		list []string
	}{
		{"of model ", cc.Models},
		{"not of model ", cc.ExcludedModels},
		{"with UUID ", cc.UUIDs},
		{"without UUID ", cc.ExcludedUUIDs},
		{"", enforcedPart(cc.Enforced)},
	} {
		if len(part.list) == 0 {
			continue
		}
		if len(b) > start {
			b = append(b, " and "...)
		}
		b = append(b, part.head...)
		for i, s := range part.list {
			if i > 0 {
				b = append(b, '|')
			}
			b = append(b, s...)
		}
	}
	return b
}

func enforcedPart(enforced bool) []string {
	if enforced {
		return []string{"enforcing memory limits"}
	}
	return nil
}
