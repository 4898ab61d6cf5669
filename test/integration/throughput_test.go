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
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// TestSchedulingThroughput measures kube-scheduler's pods/second with the
// extender (gpu-mem pods on 1,000 nodes × 8 cards) against the same pods
// asking whole cards (nvidia.com/gpu style, no extender), and against an
// extender that does no work at all (filter and prioritize answer at once,
// the scheduler binds): the floor of the extender protocol itself on this
// machine. Each runs on its own fresh control plane, in one run; the
// extender's filter, prioritize and bind latencies come from its metrics.
// A measurement: it runs only with GPUSHARE_BENCH=1 (make bench).
func TestSchedulingThroughput(t *testing.T) {
	if os.Getenv("GPUSHARE_BENCH") != "1" {
		t.Skip("a measurement: run with GPUSHARE_BENCH=1 (make bench)")
	}
	const nodes, pods = 1000, 2000
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
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
	floor := runThroughput(t, floorCP.Client(framework.AdminUser), nodes, pods, func(name string) *corev1.Node {
		return util.MakeNode(name).Cards("V100", 32, 32, 32, 32, 32, 32, 32, 32).Obj()
	}, func(i int) *corev1.Pod {
		return util.MakePod(fmt.Sprintf("p%05d", i)).GPUMem(int64(2 + 2*(i%4))).Obj()
	})
	floorCP.Stop()

	// With the extender, through the shipped scheduler configuration.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	cp := framework.StartT(t, framework.Options{ExtenderURL: "http://" + listen + extender.Prefix,
		SchedulerConfig: filepath.Join(root, "config", "kube-scheduler-config.yaml")})
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(0)))
	done := make(chan error, 1)
	go func() {
		done <- extender.Run(ctx, extender.Config{Kubeconfig: cp.AdminKubeconfig(), Listen: listen, Policy: allocator.DefaultPolicy, QPS: 500, Burst: 1000})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("extender: %v", err)
		}
	})
	waitReady(t, listen)
	with := runThroughput(t, cp.Client(framework.AdminUser), nodes, pods, func(name string) *corev1.Node {
		return util.MakeNode(name).Cards("V100", 32, 32, 32, 32, 32, 32, 32, 32).Obj()
	}, func(i int) *corev1.Pod {
		return util.MakePod(fmt.Sprintf("p%05d", i)).GPUMem(int64(2 + 2*(i%4))).Obj()
	})
	hist := scrape(t, listen)

	report := fmt.Sprintf("nodes=%d pods=%d: without extender %.1f pods/s, no-op extender %.1f pods/s (ratio %.2f), gpushare extender %.1f pods/s (ratio %.2f); "+
		"extender filter p50 %s p99 %s, prioritize p50 %s p99 %s, bind p50 %s p99 %s",
		nodes, pods, base, floor, floor/base, with, with/base,
		hist.quantile("filter", 0.5), hist.quantile("filter", 0.99),
		hist.quantile("prioritize", 0.5), hist.quantile("prioritize", 0.99),
		hist.quantile("bind", 0.5), hist.quantile("bind", 0.99))
	t.Log(report)
	fmt.Printf("BenchmarkSchedulingThroughput/nodes=%d/pods=%d\t1\t%.1f plain-pods/s\t%.1f noop-extender-pods/s\t%.1f extender-pods/s\t%.2f ratio\n", nodes, pods, base, floor, with, with/base)
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
// creation until the last binding.
func runThroughput(t *testing.T, c kubernetes.Interface, nodes, pods int, node func(name string) *corev1.Node, pod func(int) *corev1.Pod) float64 {
	t.Helper()
	ctx := context.Background()
	parallel(t, nodes, func(i int) error {
		return createNode(ctx, c, node(fmt.Sprintf("node-%04d", i)))
	})
	time.Sleep(2 * time.Second) // let the scheduler's and extender's caches see every node
	start := time.Now()
	parallel(t, pods, func(i int) error {
		p := pod(i)
		p.UID = ""
		_, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	created := time.Since(start)
	var bound int
	for time.Since(start) < 10*time.Minute {
		list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err == nil {
			bound = 0
			for _, p := range list.Items {
				if p.Spec.NodeName != "" {
					bound++
				}
			}
			if bound == pods {
				break
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	elapsed := time.Since(start)
	t.Logf("%d pods created in %v, %d bound after %v", pods, created.Round(time.Millisecond), bound, elapsed.Round(time.Millisecond))
	if bound != pods {
		t.Fatalf("only %d of %d pods bound", bound, pods)
	}
	return float64(pods) / elapsed.Seconds()
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
