package cache

import (
	"slices"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// cardUser is who the MPS clients on one card in mps mode run as.
type cardUser struct {
	index int // the card's index
	user  gpushare.MPSUser
	// mixed: clients of two users are there already (admitted before the
	// device plugin checked, or by another plugin); no one may join.
	mixed bool
}

// mpsUsers returns who the MPS clients on each of ns's cards in mps mode
// run as, nil when no such card has a client. A pod is a client of the
// cards where one of its containers is alone (by its allocation, or its
// Aliyun index); reserved room is none. The caller holds c.mu.
func (ns *nodeState) mpsUsers(pods map[types.UID]*podState) []cardUser {
	if !slices.ContainsFunc(ns.node.Cards, func(c allocator.Card) bool { return c.Isolation() == gpushare.IsolationMPS }) {
		return nil
	}
	var out []cardUser
	add := func(index int, user gpushare.MPSUser) {
		if pos := ns.position(index); pos < 0 || ns.node.Cards[pos].Isolation() != gpushare.IsolationMPS {
			return
		}
		for i := range out {
			if out[i].index == index {
				out[i].mixed = out[i].mixed || out[i].user != user
				return
			}
		}
		out = append(out, cardUser{index: index, user: user})
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
	slices.SortFunc(out, func(a, b cardUser) int { return a.index - b.index })
	return out
}

// withForeignMPS returns n as a pod whose MPS clients run as user sees it:
// a copy whose cards with clients of another user (or of two) are
// ForeignMPS, or n itself when it has none.
func withForeignMPS(n *allocator.Node, users []cardUser, user gpushare.MPSUser) *allocator.Node {
	if user == gpushare.MPSUserNone {
		return n
	}
	var out *allocator.Node
	for _, cu := range users {
		if !cu.mixed && cu.user == user {
			continue
		}
		if out == nil {
			cp := *n
			cp.Cards = slices.Clone(n.Cards)
			out = &cp
		}
		for i := range out.Cards {
			if out.Cards[i].Index == cu.index {
				out.Cards[i].ForeignMPS = true
			}
		}
	}
	if out == nil {
		return n
	}
	return out
}

// forMPS returns s as a pod whose MPS clients run as user sees it (see
// withForeignMPS); s itself when that changes nothing.
func (s *nodeSnap) forMPS(user gpushare.MPSUser) *nodeSnap {
	if s == nil || len(s.mpsUsers) == 0 {
		return s
	}
	n := withForeignMPS(&s.node, s.mpsUsers, user)
	if n == &s.node {
		return s
	}
	out := *s
	out.node = *n
	return &out
}
