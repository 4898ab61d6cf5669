package cli

import (
	"cmp"
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

	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/simulator"
	"github.com/gpushare/gpushare/pkg/simulator/plot"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
	"github.com/gpushare/gpushare/pkg/version"
)

// Config is one gpushare-simulate invocation: the replays, and the files
// they read and write.
type Config struct {
	simulator.Config
	// NodesFile and PodsFile: openb CSV, or Kubernetes YAML/JSON (may be
	// the same file).
	NodesFile, PodsFile string
	Format              simulator.Format
	// PlotFile is "" for no plot; its extension (.svg, .png) picks the format.
	PlotFile string
	// SchedulerFile is the kube-scheduler configuration to replay, ""
	// for ShippedScheduler; Scheduler is what Simulate reads of it.
	SchedulerFile string
	// KubeSchedulerMinor is the minor version (1.x) of the kube-scheduler
	// replayed (Scheduler.ForKubernetes); 0 is DefaultKubeSchedulerMinor.
	KubeSchedulerMinor int
	// Variant, when not zero, is applied to the trace before the replays;
	// WritePods, when not "", receives the pods replayed (openb CSV).
	Variant   trace.Variant
	WritePods string
}

const usage = `Usage: gpushare-simulate --nodes FILE --pods FILE [flags]

Replays a pod list on a node list with each policy and seed, the methodology
of the FGD study (Weng et al., USENIX ATC '23): pods sorted by name and
shuffled with the seed, then clones of random pods appended until the GPU
demand passes 130% of the GPU capacity, submitted one by one, a pod that fits
nowhere failed, nothing departs. It runs the extender's own allocator and
scoring code. Prints the allocated share of GPU capacity when the arrived
demand is 90, 100, 110, 120 and 130% of it.

It replays kube-scheduler as config/kube-scheduler-config.yaml configures it
(or --scheduler-config): its node sampling (above 100 nodes each scheduling
cycle hands the extender only the first nodes, from a rotating start, that
pass kube-scheduler's own filters: CPU, memory, total GPU memory), its own
scores, which break the extender's ties and place the pods that ask no GPU
memory (--cpu-pods place; skip leaves them out).

Inputs: openb CSV (alibaba/clusterdata cluster-trace-gpu-v2023: a card is
1000 units, a sharing task asks gpu_milli of them, num_gpu > 1 whole cards),
or Kubernetes YAML/JSON as "kubectl get nodes,pods -o yaml" writes it (the
same file may be given to both flags).

Example:
  gpushare-simulate \
    --nodes pkg/simulator/testdata/openb/openb_node_list_gpu_node.csv \
    --pods pkg/simulator/testdata/openb/openb_pod_list_default.csv \
    --policy fgd,fragaware --seeds 42-51 --plot allocation.svg

Flags:
`

// Main runs gpushare-simulate with args (its command line without the
// program's name) and returns the exit status: 0, 1 for a failed run, 2 for bad usage.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "simulate: %v\nRun 'gpushare-simulate --help' for usage.\n", err)
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
	policies := fs.String("policy", strings.Join(simulator.DefaultPolicies, ","), "policies to compare, comma-separated, of "+strings.Join(allocator.PolicyNames(), ", ")+
		"; POLICY@dra:ORDER[/CHOICE] replays the GPU pods as DRA claims: the card is the first with room in ORDER (index, smallest-first, largest-first or fullest-first), the node rated by POLICY on that card (CHOICE extender, the default) or by kube-scheduler alone (scheduler)")
	seeds := fs.String("seeds", "42-51", `seeds: a range "42-51", a list "1,5,9" or one "7"`)
	format := fs.String("format", string(simulator.FormatTable), "output: table, json (one array, one object per policy) or csv")
	fs.StringVar(&cfg.PlotFile, "plot", "", "also draw allocation vs arrived demand, one line per policy, to this .svg or .png file")
	fs.Float64Var(&cfg.Inflate, "inflate", simulator.DefaultInflate, "append clones until the GPU demand passes this share of GPU capacity")
	cpuPods := fs.String("cpu-pods", string(simulator.CPUPodsPlace), "pods that ask no GPU memory: place (placed as the replayed kube-scheduler configuration places them, taking CPU and memory from the GPU nodes) or skip (left out: the figures measure GPU placement alone)")
	topology := fs.String("topology", string(simulator.TopologyExtender), "the chart topology to replay: extender (the cluster's kube-scheduler, configured as --scheduler-config, places every pod) or second-scheduler (the chart's kube-scheduler, configured as --scheduler-config, places the pods that ask GPU memory; the cluster's own, with kube-scheduler's defaults, the others)")
	idleMin := fs.Int("idle-taint-min-cards", gpushare.DefaultIdleTaintMinCards, "the device plugin's --idle-taint-min-cards to replay: a node of at least this many cards, none holding GPU memory, carries the gpushare.io/idle-gpus taint (PreferNoSchedule), which kube-scheduler's TaintToleration weighs for every pod; 0: no node is tainted; unset: the plugin's default, and 0 in a DRA replay (POLICY@dra:…), whose nodes run no device plugin")
	fs.StringVar(&cfg.SchedulerFile, "scheduler-config", "", "kube-scheduler configuration (KubeSchedulerConfiguration) to replay: its percentageOfNodesToScore, NodeResourcesFit and NodeResourcesBalancedAllocation scoring and the gpushare extender's weight; default: what config/kube-scheduler-config.yaml ships")
	kubeVersion := fs.String("kube-scheduler-version", "v1."+strconv.Itoa(simulator.DefaultKubeSchedulerMinor), "the kube-scheduler version to replay, v1.MINOR[.PATCH]: from v1.36 its NodeResourcesBalancedAllocation scores how much a pod improves a node's balance, not the balance once it is there")
	fs.BoolVar(&cfg.GPUOnly, "gpu-only", false, "score from GPU memory alone, as the extender does for nodes that report no CPU (bestfit, fgd and fragaware otherwise weigh CPU too, fragaware memory as well); CPU and memory must fit either way")
	percentage := fs.Int("percentage-of-nodes-to-score", int(simulator.DefaultPercentageOfNodesToScore), "kube-scheduler's percentageOfNodesToScore to replay, 0 to 100: above 100 nodes kube-scheduler stops filtering once it has found this share of the nodes (at least 100) and the extender chooses among those only; 0 is kube-scheduler's adaptive default (50% less 1% per 125 nodes, at least 5%); the default is the --scheduler-config's, else what config/kube-scheduler-config.yaml ships")
	checkVariant := variantFlags(fs, &cfg.Variant)
	fs.StringVar(&cfg.WritePods, "write-pods", "", "also write the pods replayed (after the variant flags) to this openb CSV file")
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
	cfg.Format = simulator.Format(*format)
	if !slices.Contains([]simulator.Format{simulator.FormatTable, simulator.FormatJSON, simulator.FormatCSV}, cfg.Format) {
		return nil, fmt.Errorf("--format %q: want table, json or csv", *format)
	}
	if ext := strings.ToLower(filepath.Ext(cfg.PlotFile)); cfg.PlotFile != "" && ext != ".svg" && ext != ".png" {
		return nil, fmt.Errorf("--plot %s: the file name must end in .svg or .png", cfg.PlotFile)
	}
	if cfg.Inflate < 1 || cfg.Inflate > 10 {
		return nil, fmt.Errorf("--inflate %g: want 1 to 10 (1.3 is the study's 130%%)", cfg.Inflate)
	}
	if *idleMin < 0 {
		return nil, fmt.Errorf("--idle-taint-min-cards %d: want 0 (no taint) or more", *idleMin)
	}
	// Unset, each replay takes Options' default: the plugin's, or none on
	// the DRA driver's nodes.
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "idle-taint-min-cards" {
			cfg.IdleTaintMinCards = idleMin
		}
	})
	minor, err := version.KubernetesMinor(*kubeVersion)
	if err != nil {
		return nil, fmt.Errorf("--kube-scheduler-version: %w", err)
	}
	cfg.KubeSchedulerMinor = minor
	cfg.Topology = simulator.Topology(*topology)
	if !slices.Contains(simulator.Topologies, cfg.Topology) {
		return nil, fmt.Errorf("--topology %q: want %s or %s", *topology, simulator.TopologyExtender, simulator.TopologySecondScheduler)
	}
	cfg.CPUPods = simulator.CPUPods(*cpuPods)
	if cfg.CPUPods != simulator.CPUPodsSkip && cfg.CPUPods != simulator.CPUPodsPlace {
		return nil, fmt.Errorf("--cpu-pods %q: want place or skip", *cpuPods)
	}
	if *percentage < 0 || *percentage > 100 {
		return nil, fmt.Errorf("--percentage-of-nodes-to-score %d: want 0 (kube-scheduler's adaptive default) to 100", *percentage)
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "percentage-of-nodes-to-score" {
			cfg.PercentageOfNodesToScore = ptr.To(int32(*percentage)) //nolint:gosec // checked to be 0..100 above
		}
	})
	if cfg.Parallel < 1 {
		return nil, fmt.Errorf("--parallel %d: want at least 1", cfg.Parallel)
	}
	if err := checkVariant(); err != nil {
		return nil, err
	}
	if *verbose {
		cfg.Progress = stderr
	}
	return cfg, nil
}

// variantFlags defines on fs the flags of the variant applied to the trace
// (trace.Variant) and returns what checks them, once fs has parsed them,
// and sets v.
func variantFlags(fs *flag.FlagSet, v *trace.Variant) (check func() error) {
	multiShare := fs.Float64("multi-gpu-share", 0, "variant: append clones of multi-GPU pods until they ask this percentage of the GPU memory (as openb's multigpuN traces)")
	multiCards := fs.String("multi-gpu-cards", "", "variant: clone only the multi-GPU pods asking these numbers of cards, comma-separated (e.g. 2,4)")
	cpuShare := fs.Float64("cpu-only-share", 0, "variant: append clones of the pods that ask no GPU memory until they are this percentage of the pods")
	specShare := fs.Float64("gpu-spec-share", 0, "variant: this percentage of the GPU pods accept only some card models (openb gpu_spec): one, and with probability 1/2 each a further one up to --gpu-spec-models, drawn in proportion to the cards of each model that could hold them")
	specModels := fs.Int("gpu-spec-models", 2, "variant: the most card models --gpu-spec-share gives a pod, 1 to 3")
	specAs := fs.String("gpu-spec-as", "annotation", "variant: how a pod given one model by --gpu-spec-share says so: annotation (gpushare.io/gpu-models, which the extender applies to each card) or label (a nodeSelector on nvidia.com/gpu.product, the node's first card as the device plugin labels it, which kube-scheduler applies before it samples nodes); pods given two models keep the annotation")
	fs.Uint64Var(&v.Seed, "variant-seed", 1, "seed of the variant's draws")
	return func() error {
		for _, s := range []struct {
			name  string
			value float64
			to    *float64
			below float64
		}{{"multi-gpu-share", *multiShare, &v.MultiGPUShare, 100}, {"cpu-only-share", *cpuShare, &v.CPUOnlyShare, 100},
			{"gpu-spec-share", *specShare, &v.GPUSpecShare, 100.000001}} {
			if s.value < 0 || s.value >= s.below {
				return fmt.Errorf("--%s %g: want a percentage, 0 to %g", s.name, s.value, min(s.below, 100))
			}
			*s.to = s.value / 100
		}
		if *specModels < 1 || *specModels > 3 {
			return fmt.Errorf("--gpu-spec-models %d: want 1 to 3", *specModels)
		}
		v.GPUSpecModels = *specModels
		switch *specAs {
		case "annotation":
		case "label":
			v.GPUSpecAsLabel = true
		default:
			return fmt.Errorf("--gpu-spec-as %q: want annotation or label", *specAs)
		}
		if *multiCards != "" {
			for _, f := range strings.Split(*multiCards, ",") {
				k, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil || k < 2 {
					return fmt.Errorf("--multi-gpu-cards %q: want numbers of cards above 1, comma-separated", *multiCards)
				}
				v.MultiGPUCards = append(v.MultiGPUCards, k)
			}
		}
		return nil
	}
}

func parsePolicies(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		base, _, err := simulator.SplitDRAPolicy(p)
		if err != nil {
			return nil, fmt.Errorf("--policy: %w", err)
		}
		if !slices.Contains(allocator.PolicyNames(), base) {
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

// Simulate loads the trace, runs every policy with every seed, and writes
// the report (and the plot).
func Simulate(ctx context.Context, cfg *Config, stdout io.Writer) error {
	if cfg.SchedulerFile != "" {
		s, err := simulator.ReadSchedulerConfig(cfg.SchedulerFile)
		if err != nil {
			return err
		}
		cfg.Scheduler = s
	}
	if cfg.Scheduler == nil {
		cfg.Scheduler = &simulator.ShippedScheduler
	}
	cfg.Scheduler = cfg.Scheduler.ForKubernetes(cmp.Or(cfg.KubeSchedulerMinor, simulator.DefaultKubeSchedulerMinor))
	tr, err := trace.LoadTrace(cfg.NodesFile, cfg.PodsFile)
	if err != nil {
		return err
	}
	if !cfg.Variant.IsZero() {
		if tr, err = cfg.Variant.Apply(tr); err != nil {
			return err
		}
	}
	if cfg.WritePods != "" {
		if err := writePodsFile(cfg.WritePods, tr.Pods); err != nil {
			return err
		}
	}
	if err := tr.Validate(); err != nil {
		return fmt.Errorf("%s, %s: %w", cfg.NodesFile, cfg.PodsFile, err)
	}
	sums, err := simulator.RunAll(ctx, tr, &cfg.Config)
	if err != nil {
		return err
	}
	if err := simulator.Write(stdout, cfg.Format, sums); err != nil {
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
		err = plot.WritePNG(f, sums)
	} else {
		err = plot.WriteSVG(f, sums)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", cfg.PlotFile, err)
	}
	return nil
}

func writePodsFile(name string, pods []trace.Pod) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	err = trace.WriteOpenbPods(f, pods)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}
