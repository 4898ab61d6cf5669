package view

import (
	"fmt"
	"testing"
)

// TestNodeIndex: the index answers as a plain map would through adds and
// removals (a removed node's slot dies), across the rebuilds of its base,
// and an older index answers as it did, but for the nodes removed since.
func TestNodeIndex(t *testing.T) {
	x := &Index{}
	ref := map[string]*Slot{}
	var old *Index
	oldRef := map[string]*Slot{}
	live := func() *Slot {
		s := &Slot{}
		s.Snap.Store(&Snap{})
		return s
	}
	for i := range 3 * maxRecent {
		name := fmt.Sprintf("n%d", i%(maxRecent+50))
		if slot := ref[name]; slot != nil {
			if i%3 == 0 {
				slot.Snap.Store(nil) // removed
				delete(ref, name)
			}
			continue
		}
		ref[name] = live()
		x = x.With(name, ref[name])
		if i == maxRecent/2 {
			old = x
			for k, v := range ref {
				oldRef[k] = v
			}
		}
		if len(x.recent) > maxRecent {
			t.Fatalf("after %d changes recent holds %d, over %d", i+1, len(x.recent), maxRecent)
		}
	}
	for i := range maxRecent + 60 {
		name := fmt.Sprintf("n%d", i)
		if got, want := x.Lookup(name), ref[name]; got != want {
			t.Errorf("lookup(%s) = %p, want %p", name, got, want)
		}
		want := oldRef[name]
		if want != nil && want.Snap.Load() == nil {
			want = nil // removed since
		}
		if got := old.Lookup(name); got != want {
			t.Errorf("the older index's lookup(%s) = %p, want %p", name, got, want)
		}
	}
}
