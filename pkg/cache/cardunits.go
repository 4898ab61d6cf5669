package cache

import (
	"cmp"
	"slices"
)

// cardUnits is what one pod holds on its node's cards: a (card index,
// units) pair per card, in index order. The cache keeps one per pod, and a
// pod holds one card or a few: a map of one entry took about 160 bytes of
// heap, a pair takes 16 (19 MiB less at 120,000 pods, BenchmarkMemory).
// Never modified once made: copies of a pod's entry share it.
type cardUnits []cardUse

// cardUse is the units held on card index idx.
type cardUse struct {
	idx   int
	units int64
}

// cardUnitsOf returns m (card index -> units) as cardUnits.
func cardUnitsOf(m map[int]int64) cardUnits {
	if len(m) == 0 {
		return nil
	}
	cu := make(cardUnits, 0, len(m))
	for idx, u := range m {
		cu = append(cu, cardUse{idx: idx, units: u})
	}
	slices.SortFunc(cu, func(a, b cardUse) int { return cmp.Compare(a.idx, b.idx) })
	return cu
}

// get returns the units held on card index idx, 0 when none.
func (cu cardUnits) get(idx int) int64 {
	for _, u := range cu {
		if u.idx == idx {
			return u.units
		}
	}
	return 0
}

// total returns the units held on all cards.
func (cu cardUnits) total() int64 {
	var t int64
	for _, u := range cu {
		t += u.units
	}
	return t
}
