package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/test/integration/extenders"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// TestSchedulingThroughput measures kube-scheduler's pods/second with the
// extender (gpu-mem pods on 1,000 nodes × 8 cards) against the same pods
// asking whole cards (nvidia.com/gpu style, no extender), and against an
// extender that does no work at all (filter and prioritize answer at once,
// the scheduler binds): the floor of the extender protocol itself on this
// machine. The extender runs as its own process (the real binary), once as
// shipped (--filter-best) and once with --filter-best=false. Each run has its own fresh control
// plane, all in one test; the extender's filter, prioritize and bind
// latencies come from its metrics. A measurement: it runs only with
// GPUSHARE_BENCH=1 (make bench).
//
// Environment, to measure other shapes (defaults: what make bench runs):
//
//	GPUSHARE_BENCH_NODES        nodes (1000)
//	GPUSHARE_BENCH_PODS         pods (2000)
//	GPUSHARE_BENCH_PERCENTAGES  kube-scheduler's percentageOfNodesToScore, comma-separated,
//	                            each measured on its own: "shipped" (the configurations as
//	                            they are), "unset" (the key removed: kube-scheduler's adaptive
//	                            default) or 0..100 ("shipped")
//	GPUSHARE_BENCH_CONFIGS      of plain, noop, floor, extender, filter-all, cpu-mix,
//	                            cpu-only, comma-separated (all)
//	GPUSHARE_BENCH_CPU_SHARE    % of the pods of cpu-mix that ask only CPU and memory (50)
//	GPUSHARE_BENCH_ROUNDS       times each configuration is measured, in alternating order
//	                            (1): the GPU pods' configurations one after another in
//	                            each round, reversed every other round, reported as
//	                            medians and the median of each round's ratio to plain's;
//	                            cpu-mix and cpu-only in pairs, likewise
//	GPUSHARE_BENCH_BACKLOG      1: the GPU pods' configurations too create their pods with
//	                            kube-scheduler stopped and measure the drain (runBacklog),
//	                            so that creating the pods, on the same cores, does not
//	                            bound the rate of a fast configuration (unset: created
//	                            while it schedules)
//	GPUSHARE_BENCH_BASE_EXTENDER another tree's extender binary (built as extenders.Build
//	                            builds it): "extender" then measures it too, right after
//	                            this tree's, on a control plane of its own ("base")
//	GPUSHARE_BENCH_PROFILE_DIR  where to write a CPU profile of each extender run
//	                            (extender-<n>.pprof, through --profiling, from the
//	                            extender's start for GPUSHARE_BENCH_PROFILE_SECONDS,
//	                            60 by default; go tool pprof reads it); unset: none
//
// cpu-mix measures what the opt-in configuration's second extender entry
// (config/kube-scheduler-config-score-cpu-pods.yaml: prioritize for every
// pod, no managedResources) costs: the same pods, a share of them asking
// only CPU and memory (4 cores, 8 GiB) between GPU pods, on the same nodes
// (8 cards, 96 cores, 512 GiB), through (a) that configuration and (b) the
// same configuration without that entry (the shipped one), each on its own
// fresh control plane and extender. cpu-only runs the
// CPU-only pods of that mix alone through (a) and (b): their own pods/s,
// and the extender's prioritize latency for them alone. Unlike the other
// configurations, whose pods are created while the scheduler works (on
// the same cores: their rate is of creation and scheduling together),
// cpu-mix and cpu-only create their pods with kube-scheduler stopped and
// measure how fast it drains them (runBacklog).
func TestSchedulingThroughput(t *testing.T) {
	if os.Getenv("GPUSHARE_BENCH") != "1" {
		t.Skip("a measurement: run with GPUSHARE_BENCH=1 (make bench)")
	}
	nodes, pods := envInt(t, "GPUSHARE_BENCH_NODES", 1000), envInt(t, "GPUSHARE_BENCH_PODS", 2000)
	settings := percentageSettings(t, os.Getenv("GPUSHARE_BENCH_PERCENTAGES"))
	configs := benchConfigs(t, os.Getenv("GPUSHARE_BENCH_CONFIGS"))
	cpuShare, rounds := envInt(t, "GPUSHARE_BENCH_CPU_SHARE", 50), envInt(t, "GPUSHARE_BENCH_ROUNDS", 1)
	if cpuShare > 100 {
		t.Fatalf("GPUSHARE_BENCH_CPU_SHARE=%d: want a percentage, 1..100", cpuShare)
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	shipped := filepath.Join(root, "config", "kube-scheduler-config.yaml")
	optIn := filepath.Join(root, "config", "kube-scheduler-config-score-cpu-pods.yaml")
	noopCfg := filepath.Join(t.TempDir(), "noop-scheduler-config.yaml")
	if err := os.WriteFile(noopCfg, []byte(extenders.NoopSchedulerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	baseBin := os.Getenv("GPUSHARE_BENCH_BASE_EXTENDER")
	var bin string
	if configs["extender"] || configs["filter-all"] || configs["cpu-mix"] || configs["cpu-only"] {
		bin = extenders.Build(t)
	}
	gpuNode := func(name string) *corev1.Node {
		return util.MakeNode(name).Cards("V100", 32, 32, 32, 32, 32, 32, 32, 32).Obj()
	}
	gpuPod := func(i int) *corev1.Pod {
		return util.MakePod(fmt.Sprintf("p%05d", i)).GPUMem(int64(2 + 2*(i%4))).Obj()
	}

	backlog := os.Getenv("GPUSHARE_BENCH_BACKLOG") == "1"
	for _, set := range settings {
		// The extender (the real binary, with args) through the scheduler
		// configuration cfg: pods made by pod on nodes made by node.
		// With backlog, the pods are created while kube-scheduler is
		// stopped (runBacklog).
		profiled := 0 // extender runs profiled so far
		extenderRun := func(bin, cfg string, backlog bool, pods int, node func(string) *corev1.Node, pod func(int) *corev1.Pod, args ...string) (float64, histograms) {
			listen := util.FreeAddr(t)
			cp := framework.StartT(t, framework.Options{ExtenderURL: "http://" + listen + extender.Prefix, SchedulerConfig: cfg})
			defer cp.Stop()
			args = append([]string{"--kubeconfig", cp.AdminKubeconfig(), "--listen", listen,
				"--kube-api-qps", "500", "--kube-api-burst", "1000"}, args...)
			profileDir, metricsAddr := os.Getenv("GPUSHARE_BENCH_PROFILE_DIR"), ""
			if profileDir != "" {
				metricsAddr = util.FreeAddr(t)
				args = append(args, "--metrics-listen", metricsAddr, "--profiling")
			}
			_, stop := startExtender(t, bin, args...)
			defer stop()
			waitReady(t, listen)
			if profileDir != "" {
				profiled++
				seconds := envInt(t, "GPUSHARE_BENCH_PROFILE_SECONDS", 60)
				done := profileCPU(t, metricsAddr, filepath.Join(profileDir, fmt.Sprintf("extender-%d.pprof", profiled)), time.Duration(seconds)*time.Second)
				defer done()
			}
			var rate float64
			if backlog {
				rate = runBacklog(t, cp.Client(framework.AdminUser), cp, nodes, pods, node, pod)
			} else {
				rate = runThroughput(t, cp.Client(framework.AdminUser), nodes, pods, node, pod)
			}
			return rate, scrape(t, listen)
		}
		latencies := func(h histograms) string {
			return fmt.Sprintf("filter p50 %s p99 %s, prioritize p50 %s p99 %s (%.0f calls), bind p50 %s p99 %s",
				h.quantile("filter", 0.5), h.quantile("filter", 0.99),
				h.quantile("prioritize", 0.5), h.quantile("prioritize", 0.99), h.count("prioritize"),
				h.quantile("bind", 0.5), h.quantile("bind", 0.99))
		}

		// The GPU pods' configurations, each measured rounds times, one
		// after another in each round, in reverse order every other round
		// (so that a machine growing busier or calmer favours none); each
		// run on a fresh control plane.
		type config struct {
			key, label, col string
			run             func() (float64, histograms)
			rates           []float64
		}
		var runs []*config
		add := func(key, label, col string, run func() (float64, histograms)) {
			runs = append(runs, &config{key: key, label: label, col: col, run: run})
		}
		if configs["plain"] {
			// Without the extender: whole cards, the scheduler's own resource fit.
			add("plain", "without extender", "plain-pods/s", func() (float64, histograms) {
				plain := framework.StartT(t, framework.Options{Scheduler: true, SchedulerConfig: set.Apply(t, shipped)})
				defer plain.Stop()
				node := func(name string) *corev1.Node {
					n := util.MakeNode(name).Obj()
					for _, rl := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
						rl["nvidia.com/gpu"] = resource.MustParse("8")
					}
					return n
				}
				pod := func(i int) *corev1.Pod {
					p := util.MakePod(fmt.Sprintf("p%05d", i)).Container("c").Obj()
					p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
					return p
				}
				if backlog {
					return runBacklog(t, plain.Client(framework.AdminUser), plain, nodes, pods, node, pod), nil
				}
				return runThroughput(t, plain.Client(framework.AdminUser), nodes, pods, node, pod), nil
			})
		}
		if configs["floor"] {
			// The shipped configuration with an extender that does no
			// work: what any extender in this topology could reach on
			// this machine (floorExtender).
			add("floor", "floor extender", "floor-extender-pods/s", func() (float64, histograms) {
				url, setClient := floorExtender(t)
				floorCP := framework.StartT(t, framework.Options{ExtenderURL: url, SchedulerConfig: set.Apply(t, shipped)})
				defer floorCP.Stop()
				client := floorCP.Client(framework.AdminUser)
				setClient(client)
				if backlog {
					return runBacklog(t, client, floorCP, nodes, pods, gpuNode, gpuPod), nil
				}
				return runThroughput(t, client, nodes, pods, gpuNode, gpuPod), nil
			})
		}
		if configs["noop"] {
			// A no-op extender with the same verbs but bind: the protocol's floor.
			add("noop", "no-op extender", "noop-extender-pods/s", func() (float64, histograms) {
				noop := extenders.Noop(t, nil)
				floorCP := framework.StartT(t, framework.Options{ExtenderURL: noop, SchedulerConfig: set.Apply(t, noopCfg)})
				defer floorCP.Stop()
				if backlog {
					return runBacklog(t, floorCP.Client(framework.AdminUser), floorCP, nodes, pods, gpuNode, gpuPod), nil
				}
				return runThroughput(t, floorCP.Client(framework.AdminUser), nodes, pods, gpuNode, gpuPod), nil
			})
		}
		// The GPU pods through the shipped scheduler configuration, as
		// shipped and with --filter-best=false.
		if configs["extender"] {
			add("extender", "gpushare extender", "extender-pods/s", func() (float64, histograms) {
				return extenderRun(bin, set.Apply(t, shipped), backlog, pods, gpuNode, gpuPod) // --filter-best is the default
			})
			if baseBin != "" {
				add("base", "base extender "+baseBin, "base-extender-pods/s", func() (float64, histograms) {
					return extenderRun(baseBin, set.Apply(t, shipped), backlog, pods, gpuNode, gpuPod)
				})
			}
		}
		if configs["filter-all"] {
			add("filter-all", "with --filter-best=false", "filter-all-pods/s", func() (float64, histograms) {
				return extenderRun(bin, set.Apply(t, shipped), backlog, pods, gpuNode, gpuPod, "--filter-best=false")
			})
		}

		name := fmt.Sprintf("nodes=%d/pods=%d", nodes, pods)
		logName := fmt.Sprintf("nodes=%d pods=%d, percentageOfNodesToScore %s", nodes, pods, set.Name)
		if set.Name != "shipped" {
			name += "/percentage=" + set.Name
		}
		if backlog {
			name += "/backlog"
			logName += ", backlog"
		}
		var plainRun *config
		for _, c := range runs {
			if c.key == "plain" {
				plainRun = c
			}
		}
		// ratios: config key -> its rate over plain's of the same round.
		ratios := map[string][]float64{}
		for r := range rounds {
			order := slices.Clone(runs)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, c := range order {
				rate, h := c.run()
				c.rates = append(c.rates, rate)
				if h != nil {
					t.Logf("%s, round %d: %s %.1f pods/s (%s)", logName, r+1, c.label, rate, latencies(h))
				} else {
					t.Logf("%s, round %d: %s %.1f pods/s", logName, r+1, c.label, rate)
				}
			}
			if plainRun == nil {
				continue
			}
			var each []string
			for _, c := range runs {
				if c != plainRun {
					ratio := c.rates[r] / plainRun.rates[r]
					ratios[c.key] = append(ratios[c.key], ratio)
					each = append(each, fmt.Sprintf("%s %.2f", c.key, ratio))
				}
			}
			if len(each) > 0 {
				t.Logf("%s, round %d: ratios to without extender: %s", logName, r+1, strings.Join(each, ", "))
			}
		}
		var logs, cols []string
		for _, c := range runs {
			m := median(c.rates)
			line := fmt.Sprintf("%s %.1f pods/s", c.label, m)
			cols = append(cols, fmt.Sprintf("%.1f %s", m, c.col))
			if rs := ratios[c.key]; len(rs) > 0 {
				each := make([]string, len(rs))
				for i, v := range rs {
					each[i] = fmt.Sprintf("%.2f", v)
				}
				line += fmt.Sprintf(" (ratio %.2f; rounds %s)", median(rs), strings.Join(each, ", "))
				col := map[string]string{"extender": "ratio", "base": "base-ratio", "filter-all": "filter-all-ratio", "noop": "noop-ratio", "floor": "floor-ratio"}[c.key]
				cols = append(cols, fmt.Sprintf("%.2f %s", median(rs), col))
			}
			logs = append(logs, line)
		}
		if len(logs) > 0 {
			if rounds > 1 {
				t.Logf("%s: medians of %d rounds: %s", logName, rounds, strings.Join(logs, "; "))
			} else {
				t.Logf("%s: %s", logName, strings.Join(logs, "; "))
			}
			fmt.Printf("BenchmarkSchedulingThroughput/%s\t%d\t%s\n", name, rounds, strings.Join(cols, "\t"))
		}

		if !configs["cpu-mix"] && !configs["cpu-only"] {
			continue
		}
		// What the opt-in entry (prioritize for every pod) costs: (a) the
		// opt-in configuration, (b) without that entry, as shipped.
		asOptIn := set.Apply(t, optIn)
		noEveryPod := withoutEveryPodEntry(t, asOptIn)
		mixNode := func(name string) *corev1.Node {
			return util.MakeNode(name).Host("96", "512Gi").Cards("V100", 32, 32, 32, 32, 32, 32, 32, 32).Obj()
		}
		mixPod := func(i int) *corev1.Pod {
			if cpuOnly(i, cpuShare) {
				return util.MakePod(fmt.Sprintf("p%05d", i)).Requests("4", "8Gi").Obj()
			}
			return gpuPod(i)
		}
		var cpuPods []int // indices of the mix's CPU-only pods
		for i := range pods {
			if cpuOnly(i, cpuShare) {
				cpuPods = append(cpuPods, i)
			}
		}
		mixName := fmt.Sprintf("%s/cpu-share=%d", name, cpuShare)
		mixLog := fmt.Sprintf("%s, %d%% of the pods CPU-only (%d)", logName, cpuShare, len(cpuPods))
		// compare runs n pods through (a) and (b) rounds times, the order
		// swapped every round so that a machine growing busier or calmer
		// favours neither.
		compare := func(what string, n int, pod func(int) *corev1.Pod) {
			var shippedSum, withoutSum float64
			var ratios []float64
			for r := range rounds {
				var shippedRate, withoutRate float64
				var shippedHist, withoutHist histograms
				runShipped := func() { shippedRate, shippedHist = extenderRun(bin, asOptIn, true, n, mixNode, pod) }
				runWithout := func() { withoutRate, withoutHist = extenderRun(bin, noEveryPod, true, n, mixNode, pod) }
				if r%2 == 0 {
					runShipped()
					runWithout()
				} else {
					runWithout()
					runShipped()
				}
				shippedSum += shippedRate
				withoutSum += withoutRate
				ratios = append(ratios, shippedRate/withoutRate)
				t.Logf("%s, %s, round %d: opt-in (prioritize for every pod) %.1f pods/s (%s); shipped, without the every-pod entry, %.1f pods/s (%s); ratio opt-in/shipped %.2f",
					mixLog, what, r+1, shippedRate, latencies(shippedHist), withoutRate, latencies(withoutHist), shippedRate/withoutRate)
			}
			shippedMean, withoutMean := shippedSum/float64(rounds), withoutSum/float64(rounds)
			each := make([]string, len(ratios))
			for i, r := range ratios {
				each[i] = fmt.Sprintf("%.2f", r)
			}
			t.Logf("%s, %s: mean of %d rounds opt-in %.1f pods/s, shipped (without the every-pod entry) %.1f pods/s, ratio %.2f; median ratio of the rounds %.2f (%s)",
				mixLog, what, rounds, shippedMean, withoutMean, shippedMean/withoutMean, median(ratios), strings.Join(each, ", "))
			fmt.Printf("BenchmarkSchedulingThroughput/%s/%s\t%d\t%.1f opt-in-pods/s\t%.1f shipped-pods/s\t%.2f ratio\t%.2f median-ratio\n",
				mixName, what, rounds, shippedMean, withoutMean, shippedMean/withoutMean, median(ratios))
		}
		if configs["cpu-mix"] {
			compare("mix", pods, mixPod)
		}
		if configs["cpu-only"] && len(cpuPods) > 0 {
			compare("cpu-only", len(cpuPods), func(j int) *corev1.Pod { return mixPod(cpuPods[j]) })
		}
	}
}

// median returns the median of vs (the mean of the middle two when even).
func median(vs []float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuOnly reports whether pod i of a mix asks only CPU and memory: share
// of every 100 consecutive pods, spread evenly (every other one at 50).
func cpuOnly(i, share int) bool { return (i+1)*share/100 > i*share/100 }

// withoutEveryPodEntry returns a scheduler configuration file: src without
// its extender entries that name no managedResources (those kube-scheduler
// calls for every pod). It fails the test unless it removed exactly one
// and another is left.
func withoutEveryPodEntry(t *testing.T, src string) string {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := dropEveryPodEntry(data)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	path := filepath.Join(t.TempDir(), "without-every-pod-"+filepath.Base(src))
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// dropEveryPodEntry removes the extender entries without managedResources
// from a KubeSchedulerConfiguration (YAML); exactly one must go and at
// least one stay.
func dropEveryPodEntry(data []byte) ([]byte, error) {
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("parsing the scheduler configuration: %w", err)
	}
	exts, _ := cfg["extenders"].([]any)
	var kept []any
	for _, e := range exts {
		if m, ok := e.(map[string]any); ok {
			if rs, _ := m["managedResources"].([]any); len(rs) == 0 {
				continue
			}
		}
		kept = append(kept, e)
	}
	if removed := len(exts) - len(kept); removed != 1 || len(kept) == 0 {
		return nil, fmt.Errorf("removing the every-pod extender entry: %d of %d entries name no managedResources, want 1 and another", removed, len(exts))
	}
	cfg["extenders"] = kept
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the scheduler configuration: %w", err)
	}
	return out, nil
}

// percentageSettings parses GPUSHARE_BENCH_PERCENTAGES ("" is "shipped").
func percentageSettings(t *testing.T, list string) []framework.PercentageSetting {
	t.Helper()
	if list == "" {
		list = "shipped"
	}
	var out []framework.PercentageSetting
	for _, v := range strings.Split(list, ",") {
		v = strings.TrimSpace(v)
		switch v {
		case "shipped", "unset":
			out = append(out, framework.PercentageSetting{Name: v})
		default:
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil || n < 0 || n > 100 {
				t.Fatalf("GPUSHARE_BENCH_PERCENTAGES: %q is not shipped, unset or 0..100", v)
			}
			out = append(out, framework.PercentageSetting{Name: v, Value: ptr.To(int32(n))})
		}
	}
	return out
}

// benchConfigs parses GPUSHARE_BENCH_CONFIGS ("" is all of them).
func benchConfigs(t *testing.T, list string) map[string]bool {
	t.Helper()
	all := []string{"plain", "noop", "floor", "extender", "filter-all", "cpu-mix", "cpu-only"}
	if list == "" {
		list = strings.Join(all, ",")
	}
	out := map[string]bool{}
	for _, c := range strings.Split(list, ",") {
		c = strings.TrimSpace(c)
		if !slices.Contains(all, c) {
			t.Fatalf("GPUSHARE_BENCH_CONFIGS: %q is not one of %s", c, strings.Join(all, ", "))
		}
		out[c] = true
	}
	return out
}

// envInt reads a positive whole number from the environment, def when unset.
func envInt(t *testing.T, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive whole number", key, v)
	}
	return n
}

// startExtender starts the extender binary with args, its log in the
// test's temporary directory, and returns its PID and a function that
// kills it (its process group) and waits for it. Like the control plane it
// is a framework.Proc: the kernel kills it if the test binary dies.
func startExtender(t *testing.T, bin string, args ...string) (pid int, stop func()) {
	t.Helper()
	p, err := framework.StartProc("extender", bin, args, filepath.Join(t.TempDir(), "extender.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p.PID(), p.Kill
}

// floorExtender serves the verbs the shipped configuration calls, doing
// no work: filter passes the first allocator.MaxBestNodes of the names it
// is sent (as many as the extender's reply carries at most), bind creates
// the pod's Binding with one API call (as the extender's does), preempt
// keeps kube-scheduler's candidates. With it, a GPU pod's cycle costs the
// protocol's exchanges and nothing else: the rate no extender in this
// topology can pass on the machine. It returns its URL prefix (the
// extender's) and a function that gives it the API client, once the
// control plane it is configured into is up.
func floorExtender(t *testing.T) (url string, setClient func(kubernetes.Interface)) {
	t.Helper()
	var mu sync.Mutex
	var client kubernetes.Interface
	mux := http.NewServeMux()
	mux.HandleFunc(extender.Prefix+"/filter", func(w http.ResponseWriter, r *http.Request) {
		var a extenderv1.ExtenderArgs
		_ = json.NewDecoder(r.Body).Decode(&a)
		res := extenderv1.ExtenderFilterResult{}
		if a.NodeNames != nil {
			names := (*a.NodeNames)[:min(len(*a.NodeNames), allocator.MaxBestNodes)]
			res.NodeNames = &names
		}
		_ = json.NewEncoder(w).Encode(res)
	})
	mux.HandleFunc(extender.Prefix+"/bind", func(w http.ResponseWriter, r *http.Request) {
		var a extenderv1.ExtenderBindingArgs
		_ = json.NewDecoder(r.Body).Decode(&a)
		mu.Lock()
		c := client
		mu.Unlock()
		res := extenderv1.ExtenderBindingResult{}
		err := errors.New("floor extender: no API client yet")
		if c != nil {
			err = c.CoreV1().Pods(a.PodNamespace).Bind(r.Context(), &corev1.Binding{
				ObjectMeta: metav1.ObjectMeta{Namespace: a.PodNamespace, Name: a.PodName, UID: a.PodUID},
				Target:     corev1.ObjectReference{Kind: "Node", Name: a.Node},
			}, metav1.CreateOptions{})
		}
		if err != nil {
			res.Error = err.Error()
		}
		_ = json.NewEncoder(w).Encode(res)
	})
	mux.HandleFunc(extender.Prefix+"/preempt", func(w http.ResponseWriter, r *http.Request) {
		var a extenderv1.ExtenderPreemptionArgs
		_ = json.NewDecoder(r.Body).Decode(&a)
		_ = json.NewEncoder(w).Encode(extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: a.NodeNameToMetaVictims})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + extender.Prefix, func(c kubernetes.Interface) {
		mu.Lock()
		defer mu.Unlock()
		client = c
	}
}

func waitReady(t *testing.T, listen string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get("http://" + listen + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("extender not ready")
}

// runThroughput creates nodes (shaped by node), then pods (made by pod) as
// fast as it can, and returns bound pods per second from the first pod's
// creation until the last binding. Bindings are counted by an informer (a
// watch), so the measurement itself costs the API server and this process
// little.
func runThroughput(t *testing.T, c kubernetes.Interface, nodes, pods int, node func(name string) *corev1.Node, pod func(int) *corev1.Pod) float64 {
	t.Helper()
	return measureThroughput(t, c, nil, nodes, pods, node, pod)
}

// runBacklog is runThroughput with kube-scheduler stopped while the pods
// are created: it returns the rate at which the scheduler drains that
// backlog, pods-1 over the time from the first binding to the last, so
// that neither creating the pods nor the scheduler's start counts.
func runBacklog(t *testing.T, c kubernetes.Interface, sched schedulerHolder, nodes, pods int, node func(name string) *corev1.Node, pod func(int) *corev1.Pod) float64 {
	t.Helper()
	return measureThroughput(t, c, sched, nodes, pods, node, pod)
}

// schedulerHolder stops and restarts kube-scheduler (a
// *framework.ControlPlane).
type schedulerHolder interface {
	KillScheduler(i int) error
	StartScheduler(ctx context.Context, i int) error
}

// measureThroughput is runThroughput, or runBacklog when sched is not nil.
func measureThroughput(t *testing.T, c kubernetes.Interface, sched schedulerHolder, nodes, pods int, node func(name string) *corev1.Node, pod func(int) *corev1.Pod) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	framework.Parallel(t, nodes, func(i int) error {
		return framework.CreateNode(ctx, c, node(fmt.Sprintf("node-%04d", i)))
	})
	// Let the scheduler's and extender's caches see every node.
	time.Sleep(time.Duration(max(2000, 2*nodes)) * time.Millisecond)
	// An informer counts the pods bound (it re-lists if its watch breaks).
	var mu sync.Mutex
	var firstBound time.Time
	bound := map[string]bool{}
	allBound := make(chan struct{})
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace("default"))
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { countBound(obj, &mu, bound, &firstBound, pods, allBound) },
		UpdateFunc: func(_, obj any) { countBound(obj, &mu, bound, &firstBound, pods, allBound) },
	})
	if err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	defer func() {
		cancel() // Shutdown waits for the informer, which stops with ctx
		factory.Shutdown()
	}()
	factory.WaitForCacheSync(ctx.Done())
	if sched != nil {
		if err := sched.KillScheduler(0); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	created := make(chan time.Duration, 1)
	createErr := make(chan error, 1)
	go func() {
		createErr <- framework.ParallelErr(pods, func(i int) error {
			p := pod(i)
			p.UID = ""
			_, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err
		})
		created <- time.Since(start)
	}()
	if sched != nil {
		if err := <-createErr; err != nil {
			t.Fatalf("creating pods: %v", err)
		}
		createErr <- nil
		if err := sched.StartScheduler(ctx, 0); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-allBound:
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	if err := <-createErr; err != nil {
		t.Fatalf("creating pods: %v", err)
	}
	mu.Lock()
	n, first := len(bound), firstBound
	mu.Unlock()
	if sched == nil {
		t.Logf("%d pods created in %v, %d bound after %v", pods, (<-created).Round(time.Millisecond), n, elapsed.Round(time.Millisecond))
	} else {
		t.Logf("%d pods created in %v with kube-scheduler stopped, %d bound from %v to %v", pods, (<-created).Round(time.Millisecond),
			n, first.Sub(start).Round(time.Millisecond), elapsed.Round(time.Millisecond))
	}
	if n != pods {
		t.Fatalf("only %d of %d pods bound", n, pods)
	}
	if sched != nil && pods > 1 {
		return float64(pods-1) / (elapsed - first.Sub(start)).Seconds()
	}
	return float64(pods) / elapsed.Seconds()
}

// countBound records obj in bound if it is a bound pod (the time of the
// first in first), and closes done when all want pods are.
func countBound(obj any, mu *sync.Mutex, bound map[string]bool, first *time.Time, want int, done chan struct{}) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if !bound[p.Name] {
		if len(bound) == 0 {
			*first = time.Now()
		}
		bound[p.Name] = true
		if len(bound) == want {
			close(done)
		}
	}
}

// histograms holds the extender's request_duration_seconds buckets per verb.
type histograms map[string][]bucket

type bucket struct {
	le    float64 // upper bound, seconds
	count float64 // cumulative
}

func scrape(t *testing.T, listen string) histograms {
	t.Helper()
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	h := histograms{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "gpushare_extender_request_duration_seconds_bucket{") || !strings.Contains(line, `result="ok"`) {
			continue
		}
		verb := between(line, `verb="`, `"`)
		le := between(line, `le="`, `"`)
		fields := strings.Fields(line)
		count, _ := strconv.ParseFloat(fields[len(fields)-1], 64)
		bound := math.Inf(1)
		if le != "+Inf" {
			bound, _ = strconv.ParseFloat(le, 64)
		}
		h[verb] = append(h[verb], bucket{le: bound, count: count})
	}
	return h
}

func between(s, from, to string) string {
	_, after, _ := strings.Cut(s, from)
	v, _, _ := strings.Cut(after, to)
	return v
}

// count returns how many requests of verb succeeded.
func (h histograms) count(verb string) float64 {
	var n float64
	for _, b := range h[verb] {
		n = max(n, b.count)
	}
	return n
}

// quantile estimates the q-quantile of a verb's latency by linear
// interpolation inside its histogram bucket, as Prometheus'
// histogram_quantile does.
func (h histograms) quantile(verb string, q float64) string {
	bs := h[verb]
	sort.Slice(bs, func(i, j int) bool { return bs[i].le < bs[j].le })
	if len(bs) == 0 || bs[len(bs)-1].count == 0 {
		return "n/a"
	}
	rank := q * bs[len(bs)-1].count
	lower, prev := 0.0, 0.0
	for _, b := range bs {
		if b.count >= rank {
			if math.IsInf(b.le, 1) {
				return fmt.Sprintf(">%v", time.Duration(lower*float64(time.Second)))
			}
			frac := (rank - prev) / math.Max(b.count-prev, 1)
			return time.Duration((lower + frac*(b.le-lower)) * float64(time.Second)).Round(time.Microsecond).String()
		}
		lower, prev = b.le, b.count
	}
	return "n/a"
}

// TestDropEveryPodEntry: the cpu-mix comparison's second configuration is
// the opt-in one less exactly its every-pod prioritize entry, which is the
// shipped one, and a configuration without such an entry (or with nothing
// else) is refused rather than measured against itself.
func TestDropEveryPodEntry(t *testing.T) {
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := os.ReadFile(filepath.Join(root, "config", "kube-scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	optIn, err := os.ReadFile(filepath.Join(root, "config", "kube-scheduler-config-score-cpu-pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dropped, err := dropEveryPodEntry(optIn)
	if err != nil {
		t.Fatal(err)
	}
	var want, got map[string]any
	if err := yaml.Unmarshal(shipped, &want); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(dropped, &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the opt-in configuration less its every-pod entry is not the shipped one (-shipped +dropped):\n%s", diff)
	}
	type entry struct {
		FilterVerb     string `json:"filterVerb"`
		PrioritizeVerb string `json:"prioritizeVerb"`
		BindVerb       string `json:"bindVerb"`
	}
	for _, tc := range []struct {
		name    string
		in      []byte
		want    []entry
		wantErr bool
	}{
		{name: "opt-in", in: optIn, want: []entry{{FilterVerb: "filter", BindVerb: "bind"}, {FilterVerb: "filter"}}},
		{name: "shipped: no every-pod entry", in: shipped, wantErr: true},
		{name: "no every-pod entry", in: []byte("extenders:\n- {filterVerb: filter, managedResources: [{name: aliyun.com/gpu-mem}]}\n"), wantErr: true},
		{name: "only the every-pod entry", in: []byte("extenders:\n- {prioritizeVerb: prioritize}\n"), wantErr: true},
		{name: "no extenders", in: []byte("kind: KubeSchedulerConfiguration\n"), wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := dropEveryPodEntry(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("dropEveryPodEntry: error %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			var got struct {
				Extenders []entry `json:"extenders"`
			}
			if err := yaml.Unmarshal(out, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Extenders); diff != "" {
				t.Errorf("extenders left (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCPUOnlyShare: cpuOnly picks share of every 100 pods, evenly.
func TestCPUOnlyShare(t *testing.T) {
	for _, tc := range []struct {
		share, pods int
		want        string // pods 0..pods-1: c CPU-only, g GPU
	}{
		{50, 6, "gcgcgc"},
		{25, 8, "gggcgggc"},
		{100, 3, "ccc"},
		{1, 100, strings.Repeat("g", 99) + "c"},
	} {
		var got strings.Builder
		for i := range tc.pods {
			if cpuOnly(i, tc.share) {
				got.WriteByte('c')
			} else {
				got.WriteByte('g')
			}
		}
		if diff := cmp.Diff(tc.want, got.String()); diff != "" {
			t.Errorf("share %d (-want +got):\n%s", tc.share, diff)
		}
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{0.29, 0.58, 0.55}, 0.55},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7}, 7},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// profileCPU fetches a CPU profile of the extender serving --profiling on
// addr, seconds long, into path, in the background; the returned func
// waits for it and fails the test if it could not be written.
func profileCPU(t *testing.T, addr, path string, d time.Duration) (wait func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(d.Seconds())))
		if err != nil {
			errc <- err
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			errc <- fmt.Errorf("GET profile: %s", resp.Status)
			return
		}
		f, err := os.Create(path)
		if err != nil {
			errc <- err
			return
		}
		_, err = io.Copy(f, resp.Body)
		errc <- errors.Join(err, f.Close())
	}()
	return func() {
		if err := <-errc; err != nil {
			t.Errorf("CPU profile of the extender: %v", err)
			return
		}
		t.Logf("CPU profile of the extender: %s", path)
	}
}
