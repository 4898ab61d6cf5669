// Command benchcmp compares the benchmarks of the work tree with those of a
// base commit on this machine, in one run: it builds each package's test
// binary from both trees, runs them alternately for -rounds rounds (the
// order swapped every round, so that a machine that slows down or speeds up
// weighs on both alike), and prints, per benchmark and metric, the median
// of each tree, the new/base ratio of the medians and the ratio's range
// over the rounds. `make bench-compare BASE=<commit>` runs it; the next
// change then sees the total since BASE, not only its own step.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	base := flag.String("base", "", "commit (or any git revision) to compare the work tree with (required)")
	pkgs := flag.String("pkgs", "./pkg/cache,./pkg/allocator", "packages whose benchmarks run, comma-separated, as go test names them")
	bench := flag.String("bench", ".", "benchmarks to run (go test -bench regexp)")
	benchtime := flag.String("benchtime", "1s", "go test -benchtime of each run")
	rounds := flag.Int("rounds", 6, "rounds; each runs every package's benchmarks once from each tree")
	flag.Parse()
	if *base == "" || *rounds < 1 {
		fmt.Fprintln(os.Stderr, "usage: benchcmp -base COMMIT [-pkgs ./pkg/a,./pkg/b] [-bench REGEXP] [-benchtime 1s] [-rounds 6]")
		os.Exit(2)
	}
	cfg := Config{Base: *base, Packages: strings.Split(*pkgs, ","), Bench: *bench, Benchtime: *benchtime, Rounds: *rounds}
	if err := Run(cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchcmp:", err)
		os.Exit(1)
	}
}
