package cache

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache/internal/view"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// mpsUsers returns who the MPS clients on each of ns's cards in mps mode
// run as, nil when no such card has a client. A pod is a client of the
// cards where one of its containers is alone, by its allocation or its
// Aliyun index. Reserved room is no client. The caller holds c.mu.
func (ns *nodeState) mpsUsers(pods map[types.UID]*podState) []view.CardUser {
	if !slices.ContainsFunc(ns.node.Cards, func(c allocator.Card) bool { return c.Isolation() == gpushare.IsolationMPS }) {
		return nil
	}
	var out []view.CardUser
	add := func(index int, user gpushare.MPSUser) {
		if pos := ns.position(index); pos < 0 || ns.node.Cards[pos].Isolation() != gpushare.IsolationMPS {
			return
		}
		for i := range out {
			if out[i].Index == index {
				out[i].Mixed = out[i].Mixed || out[i].User != user
				return
			}
		}
		out = append(out, view.CardUser{Index: index, User: user})
	}
	for uid := range ns.pods {
		ps := pods[uid]
		if ps == nil || ps.state == StateReserved || ps.mpsUser == gpushare.MPSUserNone {
			continue
		}
		switch {
		case ps.alloc != nil:
			for _, c := range ps.alloc.Containers {
				if len(c.Devices) == 1 {
					add(c.Devices[0].Index, ps.mpsUser)
				}
			}
		case ps.legacyIndex >= 0:
			add(int(ps.legacyIndex), ps.mpsUser)
		}
	}
	slices.SortFunc(out, func(a, b view.CardUser) int { return a.Index - b.Index })
	return out
}
