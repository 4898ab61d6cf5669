package gpushare

import "testing"

func TestWantsIdleTaint(t *testing.T) {
	for _, tc := range []struct {
		cards, minCards int
		idle, want      bool
	}{
		{8, 4, true, true},
		{4, 4, true, true},
		{2, 4, true, false},
		{8, 4, false, false},
		{8, 0, true, false},
		{0, 4, true, false},
	} {
		if got := WantsIdleTaint(tc.cards, tc.minCards, tc.idle); got != tc.want {
			t.Errorf("WantsIdleTaint(%d cards, min %d, idle %v) = %v, want %v", tc.cards, tc.minCards, tc.idle, got, tc.want)
		}
	}
}
