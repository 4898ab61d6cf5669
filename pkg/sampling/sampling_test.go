package sampling

import (
	"fmt"
	"testing"
)

// TestNodesToFind checks kube-scheduler's numFeasibleNodesToFind
// (pkg/scheduler/schedule_one.go): every node under 100; else the
// percentage (0: 50% less 1% per 125 nodes, at least 5%), at least 100.
func TestNodesToFind(t *testing.T) {
	tests := []struct {
		percentage int32
		nodes      int
		want       int
	}{
		{0, 50, 50},
		{0, 99, 99},
		{0, 100, 100}, // 50% of 100 is 50: at least 100
		{0, 150, 100},
		{0, 400, 188},   // 47%
		{0, 1000, 420},  // 42%
		{0, 1213, 497},  // 41% of the openb trace's nodes
		{0, 5000, 500},  // 10%
		{0, 5852, 292},  // 50 - 46 = 4%: 5% at least
		{0, 10000, 500}, // 5%
		{100, 5000, 5000},
		{100, 50, 50},
		{50, 400, 200},
		{50, 150, 100},
		{1, 20000, 200}, // a set percentage is not raised to 5%
		{10, 5000, 500},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d%% of %d", tc.percentage, tc.nodes), func(t *testing.T) {
			if got := NodesToFind(tc.percentage, tc.nodes); got != tc.want {
				t.Errorf("NodesToFind(%d, %d) = %d, want %d", tc.percentage, tc.nodes, got, tc.want)
			}
		})
	}
}

// TestMayHaveStopped: kube-scheduler sends fewer than NodesToFind nodes only
// when no more passed its filters; within a slack of two for informers that
// disagree on the cluster's size.
func TestMayHaveStopped(t *testing.T) {
	tests := []struct {
		name        string
		percentage  int32
		nodes, sent int
		want        bool
	}{
		{"a small cluster: every feasible node sent", 0, 99, 99, false},
		{"100 of 111: NodesToFind is 100", 0, 111, 100, true},
		{"99 of 111: it stops at 100 at the earliest", 0, 111, 99, false},
		{"498 of 5,000: within the slack of 500", 0, 5000, 498, true},
		{"497 of 5,000: below the slack", 0, 5000, 497, false},
		{"500 of 5,000", 0, 5000, 500, true},
		{"300 of 5,000: no more passed", 0, 5000, 300, false},
		{"every node scored, one short: within the slack", 100, 5000, 4999, true},
		{"every node scored, fewer feasible", 100, 5000, 4000, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := MayHaveStopped(tc.percentage, tc.nodes, tc.sent); got != tc.want {
				t.Errorf("MayHaveStopped(%d, %d, %d) = %v, want %v", tc.percentage, tc.nodes, tc.sent, got, tc.want)
			}
		})
	}
}
