package gpushare

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Decoders must never panic, and whatever they accept (Validate passed:
// the decoders check that) must survive an encode/decode round trip
// unchanged.

func FuzzParseAllocation(f *testing.F) {
	f.Add(`{"node":"gpu-a","unit":"GiB","containers":[{"name":"prep","init":true,"devices":[{"index":1,"uuid":"GPU-b","units":8}]},{"name":"train","devices":[{"index":1,"uuid":"GPU-b","units":4}]}]}`)
	f.Add(`{"node":"n","containers":[{"name":"c","devices":[{"index":0,"units":1},{"index":0,"units":1}]}]}`)
	f.Add(`{"node":"","containers":null}`)
	f.Add(`[]`)
	f.Add(`{"node":"n","containers":[{"name":"c","devices":[{"index":-1,"units":9223372036854775807}]}]}`)
	// Two shares on one card whose sum wraps int64.
	f.Add(`{"node":"n","containers":[{"name":"a","devices":[{"index":0,"units":9223372036854775807}]},{"name":"b","devices":[{"index":0,"units":1}]}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAllocation(s)
		if err != nil {
			return
		}
		enc, err := a.Encode()
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseAllocation(enc)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", enc, err)
		}
		if diff := cmp.Diff(a, b); diff != "" {
			t.Fatalf("round trip changed the allocation (-first +second):\n%s", diff)
		}
		// Validate sees each share alone; their sums must not wrap.
		for idx, u := range a.PerCard() {
			if u <= 0 {
				t.Fatalf("PerCard has %d units on card %d", u, idx)
			}
		}
	})
}

func FuzzParseInventory(f *testing.F) {
	f.Add(`{"unit":"GiB","devices":[{"index":0,"uuid":"GPU-8f1c","model":"Tesla T4","memory":16,"healthy":true},{"index":1,"uuid":"GPU-2a7e","model":"A100","memory":80,"healthy":false}]}`)
	f.Add(`{"unit":"MiB","devices":[]}`)
	f.Add(`{"unit":"TiB"}`)
	f.Add(`{"unit":"GiB","devices":[{"index":0,"memory":16},{"index":0,"memory":16}]}`)
	f.Add(`{"unit":"GiB","devices":[{"index":0,"uuid":"a,b","memory":1}]}`)
	f.Fuzz(func(t *testing.T, s string) {
		inv, err := ParseInventory(s)
		if err != nil {
			return
		}
		enc, err := inv.Encode()
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseInventory(enc)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", enc, err)
		}
		if diff := cmp.Diff(inv, again); diff != "" {
			t.Fatalf("round trip changed the inventory (-first +second):\n%s", diff)
		}
	})
}
