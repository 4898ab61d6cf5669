package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkFilterBest/nodes=5000-2         	     300	   2089000 ns/op	  179040 B/op	      17 allocs/op
BenchmarkSearchStorm/heavy-16   	     200	    744147 ns/op	       301.6 attack-max-ms
--- BENCH: BenchmarkSearchStorm/heavy-2
PASS
`)
	want := map[string]sample{
		"BenchmarkFilterBest/nodes=5000": {"ns/op": 2089000, "B/op": 179040, "allocs/op": 17},
		"BenchmarkSearchStorm/heavy":     {"ns/op": 744147, "attack-max-ms": 301.6},
	}
	if diff := cmp.Diff(want, parse(out)); diff != "" {
		t.Errorf("parse (-want +got):\n%s", diff)
	}
}

func TestMedianAndRatios(t *testing.T) {
	if got := median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("median of 3, 1, 2 = %v", got)
	}
	if got := median([]float64{4, 1, 2, 3}); got != 2.5 {
		t.Errorf("median of 4, 1, 2, 3 = %v", got)
	}
	lo, hi := roundRatios([]float64{2, 4, 0}, []float64{1, 6, 5})
	if lo != 0.5 || hi != 1.5 {
		t.Errorf("round ratios = %v-%v, want 0.5-1.5", lo, hi)
	}
}
