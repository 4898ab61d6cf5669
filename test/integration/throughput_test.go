package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/extender"
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
func TestSchedulingThroughput(t *testing.T) {
	if os.Getenv("GPUSHARE_BENCH") != "1" {
		t.Skip("a measurement: run with GPUSHARE_BENCH=1 (make bench)")
	}
	const nodes, pods = 1000, 2000
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := buildExtender(t)
	gpuNode := func(name string) *corev1.Node {
		return util.MakeNode(name).Cards("V100", 32, 32, 32, 32, 32, 32, 32, 32).Obj()
	}
	gpuPod := func(i int) *corev1.Pod {
		return util.MakePod(fmt.Sprintf("p%05d", i)).GPUMem(int64(2 + 2*(i%4))).Obj()
	}

	// Without the extender: whole cards, the scheduler's own resource fit.
	plain := framework.StartT(t, framework.Options{Scheduler: true})
	base := runThroughput(t, plain.Client(framework.AdminUser), nodes, pods, func(name string) *corev1.Node {
		n := util.MakeNode(name).Obj()
		for _, rl := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
			rl["nvidia.com/gpu"] = resource.MustParse("8")
		}
		return n
	}, func(i int) *corev1.Pod {
		p := util.MakePod(fmt.Sprintf("p%05d", i)).Container("c").Obj()
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
		return p
	})
	plain.Stop()

	// A no-op extender with the same verbs but bind: the protocol's floor.
	noop := noopExtender(t)
	cfg := filepath.Join(t.TempDir(), "noop-scheduler-config.yaml")
	if err := os.WriteFile(cfg, []byte(noopSchedulerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	floorCP := framework.StartT(t, framework.Options{ExtenderURL: noop, SchedulerConfig: cfg})
	floor := runThroughput(t, floorCP.Client(framework.AdminUser), nodes, pods, gpuNode, gpuPod)
	floorCP.Stop()

	// The extender through the shipped scheduler configuration, as shipped
	// and with --filter-best.
	withExtender := func(args ...string) (float64, histograms) {
		listen := freeAddr(t)
		cp := framework.StartT(t, framework.Options{ExtenderURL: "http://" + listen + extender.Prefix,
			SchedulerConfig: filepath.Join(root, "config", "kube-scheduler-config.yaml")})
		defer cp.Stop()
		_, stop := startExtender(t, bin, append([]string{"--kubeconfig", cp.AdminKubeconfig(), "--listen", listen,
			"--kube-api-qps", "500", "--kube-api-burst", "1000"}, args...)...)
		defer stop()
		waitReady(t, listen)
		rate := runThroughput(t, cp.Client(framework.AdminUser), nodes, pods, gpuNode, gpuPod)
		return rate, scrape(t, listen)
	}
	best, bestHist := withExtender() // --filter-best is the default
	with, hist := withExtender("--filter-best=false")

	latencies := func(h histograms) string {
		return fmt.Sprintf("filter p50 %s p99 %s, prioritize p50 %s p99 %s (%.0f calls), bind p50 %s p99 %s",
			h.quantile("filter", 0.5), h.quantile("filter", 0.99),
			h.quantile("prioritize", 0.5), h.quantile("prioritize", 0.99), h.count("prioritize"),
			h.quantile("bind", 0.5), h.quantile("bind", 0.99))
	}
	t.Logf("nodes=%d pods=%d: without extender %.1f pods/s; no-op extender %.1f pods/s (ratio %.2f); "+
		"gpushare extender %.1f pods/s (ratio %.2f; %s); with --filter-best=false %.1f pods/s (ratio %.2f; %s)",
		nodes, pods, base, floor, floor/base, best, best/base, latencies(bestHist), with, with/base, latencies(hist))
	fmt.Printf("BenchmarkSchedulingThroughput/nodes=%d/pods=%d\t1\t%.1f plain-pods/s\t%.1f noop-extender-pods/s\t%.1f extender-pods/s\t%.2f ratio\t%.1f filter-all-pods/s\t%.2f filter-all-ratio\n",
		nodes, pods, base, floor, best, best/base, with, with/base)
}

// buildExtender builds the extender binary into a temporary directory.
func buildExtender(t *testing.T) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gpushare-scheduler-extender")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(root, "extender")).CombinedOutput(); err != nil {
		t.Fatalf("building the extender: %v\n%s", err, out)
	}
	return bin
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

// freeAddr returns a 127.0.0.1 address with a port free at the time.
func freeAddr(t *testing.T) string {
	t.Helper()
	addr, err := framework.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// noopSchedulerConfig calls an extender for filter and prioritize only
// (the scheduler binds), with the shipped configuration's client limits.
const noopSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: set-by-framework, qps: 500, burst: 1000}
extenders:
- urlPrefix: set-by-framework
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 10
  nodeCacheCapable: true
  managedResources: [{name: aliyun.com/gpu-mem, ignoredByScheduler: false}]
`

// noopExtender serves filter (every node passes) and prioritize (every
// node scores 5) without looking at anything, and returns its URL prefix.
func noopExtender(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/noop/filter", func(w http.ResponseWriter, r *http.Request) {
		var a extenderv1.ExtenderArgs
		_ = json.NewDecoder(r.Body).Decode(&a)
		_ = json.NewEncoder(w).Encode(extenderv1.ExtenderFilterResult{NodeNames: a.NodeNames, FailedNodes: map[string]string{}})
	})
	mux.HandleFunc("/noop/prioritize", func(w http.ResponseWriter, r *http.Request) {
		var a extenderv1.ExtenderArgs
		_ = json.NewDecoder(r.Body).Decode(&a)
		out := extenderv1.HostPriorityList{}
		if a.NodeNames != nil {
			for _, n := range *a.NodeNames {
				out = append(out, extenderv1.HostPriority{Host: n, Score: 5})
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/noop"
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
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	parallel(t, nodes, func(i int) error {
		return createNode(ctx, c, node(fmt.Sprintf("node-%04d", i)))
	})
	time.Sleep(2 * time.Second) // let the scheduler's and extender's caches see every node
	// An informer counts the pods bound (it re-lists if its watch breaks).
	var mu sync.Mutex
	bound := map[string]bool{}
	allBound := make(chan struct{})
	factory := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace("default"))
	_, err := factory.Core().V1().Pods().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { countBound(obj, &mu, bound, pods, allBound) },
		UpdateFunc: func(_, obj any) { countBound(obj, &mu, bound, pods, allBound) },
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
	start := time.Now()
	created := make(chan time.Duration, 1)
	createErr := make(chan error, 1)
	go func() {
		createErr <- parallelErr(pods, func(i int) error {
			p := pod(i)
			p.UID = ""
			_, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
			return err
		})
		created <- time.Since(start)
	}()
	select {
	case <-allBound:
	case <-ctx.Done():
	}
	elapsed := time.Since(start)
	if err := <-createErr; err != nil {
		t.Fatalf("creating pods: %v", err)
	}
	mu.Lock()
	n := len(bound)
	mu.Unlock()
	t.Logf("%d pods created in %v, %d bound after %v", pods, (<-created).Round(time.Millisecond), n, elapsed.Round(time.Millisecond))
	if n != pods {
		t.Fatalf("only %d of %d pods bound", n, pods)
	}
	return float64(pods) / elapsed.Seconds()
}

// countBound records obj in bound if it is a bound pod, and closes done
// when all want pods are.
func countBound(obj any, mu *sync.Mutex, bound map[string]bool, want int, done chan struct{}) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p.Spec.NodeName == "" {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if !bound[p.Name] {
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
