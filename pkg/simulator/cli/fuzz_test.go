package cli

import "testing"

func FuzzParseSeeds(f *testing.F) {
	for _, s := range []string{"42-51", "1,5,9", "7", "0-999", "5-4", "1,1", "18446744073709551615", "18446744073709551614-18446744073709551615", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		seeds, err := ParseSeeds(s)
		if err != nil {
			return
		}
		if len(seeds) == 0 {
			t.Fatalf("ParseSeeds(%q) accepted no seed", s)
		}
		seen := map[uint64]bool{}
		for _, v := range seeds {
			if seen[v] {
				t.Fatalf("ParseSeeds(%q) returned seed %d twice", s, v)
			}
			seen[v] = true
		}
	})
}
