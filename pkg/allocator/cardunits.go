package allocator

import (
	"cmp"
	"slices"
)

// CardUnits is what one pod holds on its node's cards: a (card index,
// units) pair per card, in index order. The cache keeps one per pod, and a
// pod holds one card or a few. For so few entries a slice of pairs is much
// smaller than a map; docs/benchmarks.md, under "Memory", has the bytes.
// It is never modified once made, as copies of a pod's entry share it.
type CardUnits []CardUse

// CardUse is the units held on card index Index.
type CardUse struct {
	Index int
	Units int64
}

// CardUnitsOf returns m (card index -> units) as CardUnits.
func CardUnitsOf(m map[int]int64) CardUnits {
	if len(m) == 0 {
		return nil
	}
	cu := make(CardUnits, 0, len(m))
	for idx, u := range m {
		cu = append(cu, CardUse{Index: idx, Units: u})
	}
	slices.SortFunc(cu, func(a, b CardUse) int { return cmp.Compare(a.Index, b.Index) })
	return cu
}

// Get returns the units held on card index idx, 0 when none.
func (cu CardUnits) Get(idx int) int64 {
	for _, u := range cu {
		if u.Index == idx {
			return u.Units
		}
	}
	return 0
}

// Total returns the units held on all cards.
func (cu CardUnits) Total() int64 {
	var t int64
	for _, u := range cu {
		t += u.Units
	}
	return t
}
