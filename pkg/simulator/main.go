package simulator

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"

	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/allocator"
)

// DefaultPolicies is the --policy default: the study's baselines, then
// FGD and our default.
var DefaultPolicies = []string{allocator.NameRandom, allocator.NameSpread, allocator.NameBinpack,
	allocator.NameBestFit, allocator.NameFGD, allocator.NameFragAware}

// Config is one `simulate` invocation.
type Config struct {
	// NodesFile and PodsFile: openb CSV, or Kubernetes YAML/JSON (may be
	// the same file).
	NodesFile, PodsFile string
	Policies            []string
	Seeds               []uint64
	Format              Format
	// PlotFile is "" for no plot; its extension (.svg, .png) picks the format.
	PlotFile string
	Inflate  float64
	CPUPods  CPUPods
	// GPUOnly: see Options.GPUOnly.
	GPUOnly bool
	// PercentageOfNodesToScore: see Options.PercentageOfNodesToScore.
	PercentageOfNodesToScore *int32
	// Parallel replays at once.
	Parallel int
	// Progress, when not nil, gets one line per finished replay.
	Progress io.Writer
}

const usage = `Usage: gpushare-scheduler-extender simulate --nodes FILE --pods FILE [flags]

Replays a pod list on a node list with each policy and seed, the methodology
of the FGD study (Weng et al., USENIX ATC '23): pods sorted by name and
shuffled with the seed, then clones of random pods appended until the GPU
demand passes 130% of the GPU capacity, submitted one by one, a pod that fits
nowhere failed, nothing departs. It runs the extender's own allocator and
scoring code. Prints the allocated share of GPU capacity when the arrived
demand is 90, 100, 110, 120 and 130% of it.

It also replays kube-scheduler's node sampling: above 100 nodes and with
--percentage-of-nodes-to-score below 100, each scheduling cycle hands the
policy only the first nodes, from a rotating start, that pass kube-scheduler's
own filters (CPU, memory, total GPU memory); the default, 100, is what
config/kube-scheduler-config.yaml ships.

Inputs: openb CSV (alibaba/clusterdata cluster-trace-gpu-v2023: a card is
1000 units, a sharing task asks gpu_milli of them, num_gpu > 1 whole cards),
or Kubernetes YAML/JSON as "kubectl get nodes,pods -o yaml" writes it (the
same file may be given to both flags).

Example:
  gpushare-scheduler-extender simulate \
    --nodes pkg/simulator/testdata/openb/openb_node_list_gpu_node.csv \
    --pods pkg/simulator/testdata/openb/openb_pod_list_default.csv \
    --policy fgd,fragaware --seeds 42-51 --plot allocation.svg

Flags:
`

// Main runs the simulate subcommand with args (without "simulate") and
// returns the exit status: 0, 1 for a failed run, 2 for bad usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "simulate: %v\nRun 'gpushare-scheduler-extender simulate --help' for usage.\n", err)
		return 2
	}
	if err := Simulate(ctx, cfg, stdout); err != nil {
		fmt.Fprintf(stderr, "simulate: %v\n", err)
		return 1
	}
	return 0
}

func parseFlags(args []string, stdout, stderr io.Writer) (*Config, error) {
	fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &Config{}
	fs.StringVar(&cfg.NodesFile, "nodes", "", "node list: openb CSV (sn,cpu_milli,memory_mib,gpu,model) or Kubernetes YAML/JSON (required)")
	fs.StringVar(&cfg.PodsFile, "pods", "", "pod list: openb CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec]) or Kubernetes YAML/JSON (required)")
	policies := fs.String("policy", strings.Join(DefaultPolicies, ","), "policies to compare, comma-separated, of "+strings.Join(allocator.PolicyNames(), ", "))
	seeds := fs.String("seeds", "42-51", `seeds: a range "42-51", a list "1,5,9" or one "7"`)
	format := fs.String("format", string(FormatTable), "output: table, json (one array, one object per policy) or csv")
	fs.StringVar(&cfg.PlotFile, "plot", "", "also draw allocation vs arrived demand, one line per policy, to this .svg or .png file")
	fs.Float64Var(&cfg.Inflate, "inflate", DefaultInflate, "append clones until the GPU demand passes this share of GPU capacity")
	cpuPods := fs.String("cpu-pods", string(CPUPodsSkip), "pods that ask no GPU memory: skip (not replayed; the extender does not place them) or spread (placed by CPU and memory as kube-scheduler's LeastAllocated would)")
	fs.BoolVar(&cfg.GPUOnly, "gpu-only", false, "score from GPU memory alone, as the extender does for nodes that report no CPU (bestfit, fgd and fragaware otherwise weigh CPU too, fragaware memory as well); CPU and memory must fit either way")
	percentage := fs.Int("percentage-of-nodes-to-score", int(DefaultPercentageOfNodesToScore), "kube-scheduler's percentageOfNodesToScore to replay, 0 to 100: above 100 nodes kube-scheduler stops filtering once it has found this share of the nodes (at least 100) and the extender chooses among those only; 0 is kube-scheduler's adaptive default (50% less 1% per 125 nodes, at least 5%); the default is what config/kube-scheduler-config.yaml ships")
	fs.IntVar(&cfg.Parallel, "parallel", runtime.GOMAXPROCS(0), "replays run at once")
	verbose := fs.Bool("v", false, "print a line to stderr as each replay finishes")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	for _, a := range args {
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(stdout)
		}
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q; every input is a flag", fs.Arg(0))
	}
	if cfg.NodesFile == "" || cfg.PodsFile == "" {
		return nil, errors.New("--nodes and --pods are required")
	}
	var err error
	if cfg.Policies, err = parsePolicies(*policies); err != nil {
		return nil, err
	}
	if cfg.Seeds, err = ParseSeeds(*seeds); err != nil {
		return nil, err
	}
	cfg.Format = Format(*format)
	if !slices.Contains([]Format{FormatTable, FormatJSON, FormatCSV}, cfg.Format) {
		return nil, fmt.Errorf("--format %q: want table, json or csv", *format)
	}
	if ext := strings.ToLower(filepath.Ext(cfg.PlotFile)); cfg.PlotFile != "" && ext != ".svg" && ext != ".png" {
		return nil, fmt.Errorf("--plot %s: the file name must end in .svg or .png", cfg.PlotFile)
	}
	if cfg.Inflate < 1 || cfg.Inflate > 10 {
		return nil, fmt.Errorf("--inflate %g: want 1 to 10 (1.3 is the study's 130%%)", cfg.Inflate)
	}
	cfg.CPUPods = CPUPods(*cpuPods)
	if cfg.CPUPods != CPUPodsSkip && cfg.CPUPods != CPUPodsSpread {
		return nil, fmt.Errorf("--cpu-pods %q: want skip or spread", *cpuPods)
	}
	if *percentage < 0 || *percentage > 100 {
		return nil, fmt.Errorf("--percentage-of-nodes-to-score %d: want 0 (kube-scheduler's adaptive default) to 100", *percentage)
	}
	cfg.PercentageOfNodesToScore = ptr.To(int32(*percentage))
	if cfg.Parallel < 1 {
		return nil, fmt.Errorf("--parallel %d: want at least 1", cfg.Parallel)
	}
	if *verbose {
		cfg.Progress = stderr
	}
	return cfg, nil
}

func parsePolicies(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if !slices.Contains(allocator.PolicyNames(), p) {
			return nil, fmt.Errorf("--policy: unknown policy %q; want one of %s", p, strings.Join(allocator.PolicyNames(), ", "))
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("--policy: %s appears twice", p)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, errors.New("--policy: no policy given")
	}
	return out, nil
}

// ParseSeeds parses "42-51" (inclusive), "1,5,9" or "7".
func ParseSeeds(s string) ([]uint64, error) {
	var out []uint64
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.ParseUint(strings.TrimSpace(lo), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds %q: %q is not a seed; want e.g. 42-51, 1,5,9 or 7", s, part)
		}
		b := a
		if isRange {
			if b, err = strconv.ParseUint(strings.TrimSpace(hi), 10, 64); err != nil {
				return nil, fmt.Errorf("--seeds %q: %q is not a range; want e.g. 42-51", s, part)
			}
			if b < a {
				return nil, fmt.Errorf("--seeds %q: the range %s runs backwards; want e.g. %d-%d", s, part, b, a)
			}
			if b-a >= 1000 {
				return nil, fmt.Errorf("--seeds %q: %d seeds; at most 1000", s, b-a+1)
			}
		}
		for v := a; ; v++ {
			if slices.Contains(out, v) {
				return nil, fmt.Errorf("--seeds %q: seed %d appears twice", s, v)
			}
			out = append(out, v)
			if v == b {
				break
			}
		}
	}
	return out, nil
}

// LoadTrace reads the nodes and the pods of a trace, each in openb CSV or
// Kubernetes YAML/JSON (told apart by the extension, else the content). A
// Kubernetes dump named by both (`--nodes cluster.yaml --pods
// cluster.yaml`) is read and decoded once.
func LoadTrace(nodesFile, podsFile string) (*Trace, error) {
	var kube struct {
		file  string
		nodes []Node
		pods  []Pod
	}
	read := func(file string) (csv io.Reader, err error) {
		if file == kube.file {
			return nil, nil
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		if isCSV(file, data) {
			return bytes.NewReader(data), nil
		}
		kube.file = file
		kube.nodes, kube.pods, err = ReadKubernetes(bytes.NewReader(data), file)
		return nil, err
	}
	tr := &Trace{}
	csv, err := read(nodesFile)
	switch {
	case err != nil:
		return nil, err
	case csv != nil:
		tr.Nodes, err = ReadOpenbNodes(csv, nodesFile)
	case len(kube.nodes) == 0:
		err = &InputError{File: nodesFile, Err: errors.New("no Node objects")}
	default:
		tr.Nodes = kube.nodes
	}
	if err != nil {
		return nil, err
	}
	csv, err = read(podsFile)
	switch {
	case err != nil:
		return nil, err
	case csv != nil:
		tr.Pods, err = ReadOpenbPods(csv, podsFile)
	case len(kube.pods) == 0:
		err = &InputError{File: podsFile, Err: errors.New("no Pod objects (finished pods are left out)")}
	default:
		tr.Pods = kube.pods
	}
	if err != nil {
		return nil, err
	}
	return tr, nil
}

// isCSV tells openb CSV from YAML/JSON: by extension, else by whether the
// first line looks like a CSV header.
func isCSV(name string, data []byte) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".csv":
		return true
	case ".yaml", ".yml", ".json":
		return false
	}
	first, _, _ := bytes.Cut(bytes.TrimLeft(data, "\ufeff \t\r\n"), []byte("\n"))
	return bytes.Count(first, []byte(",")) >= 3 && !bytes.ContainsAny(first, ":{")
}

// Simulate loads the trace, runs every policy with every seed, and writes
// the report (and the plot).
func Simulate(ctx context.Context, cfg *Config, stdout io.Writer) error {
	tr, err := LoadTrace(cfg.NodesFile, cfg.PodsFile)
	if err != nil {
		return err
	}
	if err := tr.Validate(); err != nil {
		return fmt.Errorf("%s, %s: %w", cfg.NodesFile, cfg.PodsFile, err)
	}
	sums, err := RunAll(ctx, tr, cfg)
	if err != nil {
		return err
	}
	if err := Write(stdout, cfg.Format, sums); err != nil {
		return err
	}
	if cfg.PlotFile == "" {
		return nil
	}
	f, err := os.Create(cfg.PlotFile)
	if err != nil {
		return err
	}
	if strings.EqualFold(filepath.Ext(cfg.PlotFile), ".png") {
		err = WritePNG(f, sums)
	} else {
		err = WriteSVG(f, sums)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", cfg.PlotFile, err)
	}
	return nil
}

// RunAll replays tr for every policy and seed of cfg, cfg.Parallel at a
// time, and returns a summary per policy in cfg.Policies order.
func RunAll(ctx context.Context, tr *Trace, cfg *Config) ([]Summary, error) {
	type job struct{ p, s int }
	results := make([][]*Result, len(cfg.Policies))
	for i := range results {
		results[i] = make([]*Result, len(cfg.Seeds))
	}
	jobs := make(chan job)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range max(1, cfg.Parallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				res, err := Run(ctx, tr, Options{Policy: cfg.Policies[j.p], Seed: cfg.Seeds[j.s], Inflate: cfg.Inflate, CPUPods: cfg.CPUPods, GPUOnly: cfg.GPUOnly,
					PercentageOfNodesToScore: cfg.PercentageOfNodesToScore})
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				if err == nil {
					results[j.p][j.s] = res
					if cfg.Progress != nil {
						fmt.Fprintf(cfg.Progress, "simulate: %s seed %d: %s%% allocated at 100%% arrival, %d failed, %.1f s\n",
							res.Policy, res.Seed, pct(res.AllocAt(100)), res.FailedTotal(), res.Seconds)
					}
				}
				mu.Unlock()
			}
		}()
	}
feed:
	for p := range cfg.Policies {
		for s := range cfg.Seeds {
			select {
			case jobs <- job{p, s}:
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sums := make([]Summary, len(cfg.Policies))
	for i, p := range cfg.Policies {
		sums[i] = Summarize(p, results[i])
	}
	return sums, nil
}
