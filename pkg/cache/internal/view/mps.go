package view

import (
	"slices"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// CardUser is who the MPS clients on one card in mps mode run as.
type CardUser struct {
	Index int // the card's index
	User  gpushare.MPSUser
	// Mixed: clients of two users are there already, so no one may join. They
	// were admitted before the device plugin checked, or by another plugin.
	Mixed bool
}

// WithForeignMPS returns n as a pod whose MPS clients run as user sees it.
// That is a copy whose cards with clients of another user, or of two, are
// ForeignMPS; or n itself when it has none.
func WithForeignMPS(n *allocator.Node, users []CardUser, user gpushare.MPSUser) *allocator.Node {
	if user == gpushare.MPSUserNone {
		return n
	}
	var out *allocator.Node
	for _, cu := range users {
		if !cu.Mixed && cu.User == user {
			continue
		}
		if out == nil {
			cp := *n
			cp.Cards = slices.Clone(n.Cards)
			out = &cp
		}
		for i := range out.Cards {
			if out.Cards[i].Index == cu.Index {
				out.Cards[i].ForeignMPS = true
			}
		}
	}
	if out == nil {
		return n
	}
	return out
}

// ForMPS returns s as a pod whose MPS clients run as user sees it (see
// WithForeignMPS), or s itself when that changes nothing.
func (s *Snap) ForMPS(user gpushare.MPSUser) *Snap {
	if s == nil || len(s.MPSUsers) == 0 {
		return s
	}
	n := WithForeignMPS(&s.Node, s.MPSUsers, user)
	if n == &s.Node {
		return s
	}
	out := *s
	out.Node = *n
	return &out
}
