package main

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Config says what Run compares.
type Config struct {
	// Base is the git revision compared with the work tree.
	Base string
	// Packages are go test package patterns, one binary each.
	Packages []string
	// Bench and Benchtime are go test's -bench and -benchtime.
	Bench, Benchtime string
	// Rounds: each runs every binary of both trees once.
	Rounds int
}

// sample is one benchmark result line's metrics: unit -> value.
type sample map[string]float64

// results: tree ("base", "new") -> "package Benchmark" -> unit -> one
// value per round.
type results map[string]map[string]map[string][]float64

// Run builds, runs and reports as the command's doc says, logging progress
// to log.
func Run(cfg Config, out, log io.Writer) error {
	top, err := gitOutput("", "rev-parse", "--show-toplevel")
	if err != nil {
		return fmt.Errorf("finding the repository (run it inside the work tree): %w", err)
	}
	rev, err := gitOutput(top, "rev-parse", "--short", cfg.Base)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", cfg.Base, err)
	}
	tmp, err := os.MkdirTemp("", "benchcmp-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	baseTree := filepath.Join(tmp, "base")
	if err := extract(top, rev, baseTree); err != nil {
		return err
	}
	trees := map[string]string{"base": baseTree, "new": top}
	bins := map[string][]string{} // tree -> binary per package
	for _, tree := range []string{"base", "new"} {
		for i, pkg := range cfg.Packages {
			bin := filepath.Join(tmp, fmt.Sprintf("%s-%d.test", tree, i))
			fmt.Fprintf(log, "building %s of %s\n", pkg, map[string]string{"base": rev, "new": "the work tree"}[tree])
			cmd := exec.Command("go", "test", "-c", "-o", bin, pkg)
			cmd.Dir, cmd.Stderr = trees[tree], log
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("building the %s tree's %s benchmarks: %w", tree, pkg, err)
			}
			bins[tree] = append(bins[tree], bin)
		}
	}
	res := results{"base": {}, "new": {}}
	for r := range cfg.Rounds {
		order := []string{"base", "new"}
		if r%2 == 1 {
			order = []string{"new", "base"}
		}
		fmt.Fprintf(log, "round %d of %d (%s first)\n", r+1, cfg.Rounds, order[0])
		for i, pkg := range cfg.Packages {
			for _, tree := range order {
				cmd := exec.Command(bins[tree][i], "-test.run", "^$", "-test.bench", cfg.Bench, "-test.benchtime", cfg.Benchtime, "-test.benchmem") //nolint:gosec // the test binaries this tool built, with the developer's own flags
				cmd.Dir = filepath.Join(trees[tree], pkg)
				cmd.Stderr = log
				outb, err := cmd.Output()
				if err != nil {
					return fmt.Errorf("running the %s tree's %s benchmarks: %w\n%s", tree, pkg, err, outb)
				}
				for name, s := range parse(outb) {
					key := pkg + " " + name
					if res[tree][key] == nil {
						res[tree][key] = map[string][]float64{}
					}
					for unit, v := range s {
						res[tree][key][unit] = append(res[tree][key][unit], v)
					}
				}
			}
		}
	}
	return report(out, rev, res)
}

// extract writes revision rev of the repository at top into dir.
func extract(top, rev, dir string) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	archive := exec.Command("git", "-C", top, "archive", rev)
	untar := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	var stderr bytes.Buffer
	archive.Stderr, untar.Stderr = &stderr, &stderr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", rev, err, stderr.String())
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("extracting %s: %w: %s", rev, err, stderr.String())
	}
	return nil
}

func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, ee.Stderr)
	}
	return strings.TrimSpace(string(out)), err
}

// parse reads go test -bench output: "BenchmarkX-2  N  V unit  V unit ...".
// The -GOMAXPROCS suffix is dropped from the names.
func parse(out []byte) map[string]sample {
	got := map[string]sample{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		s := sample{}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				s[f[i+1]] = v
			}
		}
		got[name] = s
	}
	return got
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// report prints one row per benchmark and unit that both trees ran.
func report(out io.Writer, rev string, res results) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "benchmark\tunit\tbase %s\tnew\tnew/base\tper round\t\n", rev)
	var keys []string
	for k := range res["new"] {
		if res["base"][k] != nil {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		var units []string
		for u := range res["new"][k] {
			if len(res["base"][k][u]) > 0 {
				units = append(units, u)
			}
		}
		first := func(u string) int { // ns/op first
			if u == "ns/op" {
				return 0
			}
			return 1
		}
		slices.SortFunc(units, func(a, b string) int { return cmp.Or(cmp.Compare(first(a), first(b)), cmp.Compare(a, b)) })
		for _, u := range units {
			b, n := res["base"][k][u], res["new"][k][u]
			mb, mn := median(b), median(n)
			ratio := "-"
			if mb != 0 {
				ratio = fmt.Sprintf("%.3f", mn/mb)
			}
			lo, hi := roundRatios(b, n)
			fmt.Fprintf(tw, "%s\t%s\t%.4g\t%.4g\t%s\t%s\t\n", k, u, mb, mn, ratio, fmt.Sprintf("%.2f-%.2f", lo, hi))
		}
	}
	return tw.Flush()
}

// roundRatios returns the least and greatest new/base ratio of the rounds
// both trees ran.
func roundRatios(base, nw []float64) (lo, hi float64) {
	n := min(len(base), len(nw))
	for i := range n {
		if base[i] == 0 {
			continue
		}
		r := nw[i] / base[i]
		if i == 0 || r < lo {
			lo = r
		}
		if i == 0 || r > hi {
			hi = r
		}
	}
	return lo, hi
}
