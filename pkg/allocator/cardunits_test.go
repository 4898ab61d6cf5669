package allocator

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestCardUnits(t *testing.T) {
	tests := []struct {
		name    string
		m       map[int]int64
		want    CardUnits
		get     map[int]int64 // index -> want get
		wantSum int64
	}{
		{name: "none", m: nil, want: nil, get: map[int]int64{0: 0}, wantSum: 0},
		{name: "one card", m: map[int]int64{3: 8}, want: CardUnits{{3, 8}}, get: map[int]int64{3: 8, 0: 0, 4: 0}, wantSum: 8},
		{name: "several, sorted by index", m: map[int]int64{7: 1, 0: 4, 2: 16}, want: CardUnits{{0, 4}, {2, 16}, {7, 1}},
			get: map[int]int64{0: 4, 2: 16, 7: 1, 1: 0}, wantSum: 21},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cu := CardUnitsOf(tc.m)
			if diff := cmp.Diff(tc.want, cu); diff != "" {
				t.Errorf("CardUnitsOf(%v) (-want +got):\n%s", tc.m, diff)
			}
			for idx, want := range tc.get {
				if got := cu.Get(idx); got != want {
					t.Errorf("Get(%d) = %d, want %d", idx, got, want)
				}
			}
			if got := cu.Total(); got != tc.wantSum {
				t.Errorf("Total() = %d, want %d", got, tc.wantSum)
			}
		})
	}
}
