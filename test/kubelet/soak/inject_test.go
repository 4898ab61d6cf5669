package soak

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// flight records how many fake components are down at once, and whether
// one was killed again while down.
type flight struct {
	mu           sync.Mutex
	down, most   int
	twice        []string
	downByName   map[string]bool
	leaderKilled int
}

type fakeComponent struct {
	f    *flight
	name string
	role string
}

func (c fakeComponent) Name() string                { return c.name }
func (c fakeComponent) Role(context.Context) string { return c.role }
func (c fakeComponent) Kill() error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.f.downByName[c.name] {
		c.f.twice = append(c.f.twice, c.name)
	}
	c.f.downByName[c.name] = true
	c.f.down++
	c.f.most = max(c.f.most, c.f.down)
	if c.role == "leader" {
		c.f.leaderKilled++
	}
	return nil
}
func (c fakeComponent) Start(context.Context) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	c.f.downByName[c.name] = false
	c.f.down--
	return nil
}

// TestInjectorOverlap: with overlap N at most N faults are in flight, at
// least two together when N > 1 (no gap between faults), never two on one
// target, and the overlaps and leader kills are counted; with overlap 1
// they come one at a time.
func TestInjectorOverlap(t *testing.T) {
	if testing.Short() {
		t.Skip("holds faults for seconds")
	}
	for _, tc := range []struct{ overlap, faults int }{{1, 3}, {3, 6}} {
		overlap, faults := tc.overlap, tc.faults
		t.Run(fmt.Sprintf("overlap=%d", overlap), func(t *testing.T) {
			f := &flight{downByName: map[string]bool{}}
			targets := Targets{
				Extenders:  []Component{fakeComponent{f, "extender-1", "leader"}, fakeComponent{f, "extender-2", "follower"}},
				Schedulers: []Component{fakeComponent{f, "scheduler-1", "leader"}, fakeComponent{f, "scheduler-2", "follower"}},
			}
			var out bytes.Buffer
			vs := NewViolations(newPrinter(&out))
			in := NewInjector(targets, NewPlanner(3, targets, 0), overlap, newPrinter(&out), vs)
			in.Run(context.Background(), func(n int) bool { return n < faults })

			counts, total := in.Counts()
			if total != faults || vs.Count() != 0 {
				t.Fatalf("%d faults (%v), %d violations, want %d and none:\n%s", total, counts, vs.Count(), faults, out.String())
			}
			if len(f.twice) > 0 {
				t.Errorf("killed again while down: %v", f.twice)
			}
			if f.most > overlap || (overlap > 1 && f.most < 2) {
				t.Errorf("at most %d down together, want %d (or 2 and more with overlap above 1)", f.most, overlap)
			}
			if got := in.Overlapped(); (overlap == 1) != (got == 0) {
				t.Errorf("%d faults overlapped with overlap %d", got, overlap)
			}
			leaders := 0
			for _, n := range in.LeaderKills() {
				leaders += n
			}
			named := strings.Count(out.String(), " (leader) (down") + strings.Count(out.String(), " (follower) (down")
			if leaders != f.leaderKilled || named != faults {
				t.Errorf("%d leader kills counted, %d made; %d of %d kills named with their role; output:\n%s", leaders, f.leaderKilled, named, faults, out.String())
			}
		})
	}
}
