package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/test/util"
)

// hostileBodies are what the flood's attackers send to filter and bind:
// over the size cap, truncated, not JSON, nested past reason, wrong types.
func hostileBodies() [][]byte {
	return [][]byte{
		[]byte(`{"Pod":{"metadata":{"name":"` + strings.Repeat("x", MaxBodyBytes+1024) + `"}}}`),
		[]byte(`{"Pod":{"metadata":{"name":"p","annotations":{"a":"`),
		bytes.Repeat([]byte{0xff, 0x00, '{'}, 4096),
		[]byte(strings.Repeat("[", 100000) + strings.Repeat("]", 100000)),
		[]byte(`{"Pod":5,"NodeNames":{"a":1},"PodName":["x"]}`),
		[]byte(`{"Pod":{"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"1e400"}}}]}},"NodeNames":["mixed"]}`),
	}
}

// BenchmarkFlood: the extender over real HTTP (the server Run builds, with
// its timeouts, body cap and in-flight bound), calm and while 8 attackers send
// hostileBodies to filter and bind without pause. One op is one healthy
// request from 16 concurrent clients: 7 of 8 a filter over the three
// fixture nodes and a 64-node node list, 1 of 8 a bind of one of 512
// pending 1 GiB pods (the first binds succeed, later ones find the cards
// full: both are answered). Reports the healthy filters' and binds' p99 latency (ms),
// the share answered 503 (refused-%), the hostile requests sent, and the
// heap after the run less before it (MiB, after a GC each, the attackers
// stopped and connections closed).
func BenchmarkFlood(b *testing.B) {
	for _, attackers := range []int{0, 8} {
		b.Run(fmt.Sprintf("attackers=%d", attackers), func(b *testing.B) { flood(b, attackers) })
	}
}

// flood runs BenchmarkFlood with n attackers.
func flood(b *testing.B, n int) {
	const pending = 512
	var pods []apiruntime.Object
	for i := range pending {
		pods = append(pods, util.MakePod(fmt.Sprintf("p%d", i)).GPUMem(1).Obj())
	}
	f := newFixture(b, pods...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := startBenchServer(ctx, f)
	defer srv.Close()
	transport := &http.Transport{MaxIdleConnsPerHost: 64}
	client := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	post := func(path string, body []byte) (int, error) {
		resp, err := client.Post(srv.URL+Prefix+path, "application/json", bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	names := []string{"mixed", "sick", "nogpu"}
	for i := range 61 {
		names = append(names, fmt.Sprintf("absent-%d", i))
	}
	filterBody := []byte(extenderArgs(b, util.MakePod("incoming").GPUMem(4).Obj(), names...))

	// path -> the healthy answers' latencies; made before the heap is
	// measured (fixed size).
	latencies := map[string]*util.Latencies{"/filter": new(util.Latencies), "/bind": new(util.Latencies)}
	var heapBefore, heapAfter runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heapBefore)

	stop := make(chan struct{})
	var attackers sync.WaitGroup
	var hostile atomic.Int64
	bodies := hostileBodies()
	for a := range n {
		attackers.Add(1)
		go func() {
			defer attackers.Done()
			for i := a; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := "/filter"
				if i%2 == 1 {
					path = "/bind"
				}
				_, _ = post(path, bodies[i%len(bodies)])
				hostile.Add(1)
			}
		}()
	}

	var next, refused, failed atomic.Int64
	b.ResetTimer()
	var clients sync.WaitGroup
	for range 16 {
		clients.Add(1)
		go func() {
			defer clients.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					break
				}
				path, body := "/filter", filterBody
				if i%8 == 7 {
					p := (i / 8) % pending
					path, body = "/bind", fmt.Appendf(nil, `{"PodName":"p%d","PodNamespace":"default","PodUID":"uid-p%d","Node":"mixed"}`, p, p)
				}
				start := time.Now()
				code, err := post(path, body)
				d := time.Since(start)
				switch {
				case err != nil || code != http.StatusOK && code != http.StatusServiceUnavailable:
					failed.Add(1)
				case code == http.StatusServiceUnavailable:
					refused.Add(1)
				default:
					latencies[path].Add(d)
				}
			}
		}()
	}
	clients.Wait()
	b.StopTimer()
	close(stop)
	attackers.Wait()
	transport.CloseIdleConnections()
	if failed.Load() > 0 {
		b.Errorf("%d healthy requests failed (neither 200 nor 503)", failed.Load())
	}
	runtime.GC()
	runtime.ReadMemStats(&heapAfter)
	for path, l := range latencies {
		b.ReportMetric(float64(l.Quantile(0.99).Microseconds())/1000, strings.TrimPrefix(path, "/")+"-p99-ms")
	}
	b.ReportMetric(100*float64(refused.Load())/float64(b.N), "refused-%")
	b.ReportMetric(float64(hostile.Load()), "hostile-requests")
	b.ReportMetric(float64(int64(heapAfter.HeapAlloc)-int64(heapBefore.HeapAlloc))/(1<<20), "heap-growth-MiB")
}

// stormPod is issue 21's pod: seven sidecars of 1 GiB, a plain init
// container of 120 GiB on 8 cards, an app container of 1 GiB (127 GiB in
// all: it fits an 8×16 GiB node by totals, so kube-scheduler sends it to
// the extender). It fits only with the sidecars on seven distinct cards.
func stormPod() *corev1.Pod {
	p := util.MakePod("storm")
	for range 7 {
		p.SidecarGPUMem(1)
	}
	return p.InitGPUMemCards(120, 8).GPUMem(1).Obj()
}

// heavyPod is a pod whose search no pruning shortens: 42 app containers
// of 3 GiB (126 GiB in all) on 8×16 GiB nodes, each card holding only 5
// of them (40 in all): it fits by totals and on no node, and only a
// budget stops the search.
func heavyPod() *corev1.Pod {
	p := util.MakePod("heavy")
	for range 42 {
		p.GPUMem(3)
	}
	return p.Obj()
}

// BenchmarkSearchStorm: the extender over real HTTP with 100 nodes of
// 8×16 GiB while 4 attackers filter a hostile pod over all of them without
// pause (storm: issue 21's pod; heavy: one that defeats every pruning and
// runs into the request budget). One op is one healthy filter (a 6 GiB
// pod, the same 100 nodes) from one client. Reports the healthy filters'
// p99 (ms), the attackers' slowest answer (ms) and their answers, and
// fails if a healthy filter failed or passed no node. Issue 21 asks p99 ≤
// 200 ms, the attacker's own filter ≤ 2 s, none failed.
func BenchmarkSearchStorm(b *testing.B) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{{"storm", stormPod()}, {"heavy", heavyPod()}} {
		b.Run(tc.name, func(b *testing.B) { searchStorm(b, tc.pod) })
	}
}

func searchStorm(b *testing.B, attack *corev1.Pod) {
	var objs []apiruntime.Object
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("big-%03d", i)
		objs = append(objs, util.MakeNode(names[i]).Cards("Tesla-T4", 16, 16, 16, 16, 16, 16, 16, 16).Obj())
	}
	f := newFixture(b, objs...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := startBenchServer(ctx, f)
	defer srv.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}, Timeout: 30 * time.Second}
	filter := func(body []byte) (*extenderv1.ExtenderFilterResult, error) {
		resp, err := client.Post(srv.URL+Prefix+"/filter", "application/json", bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("status %d", resp.StatusCode)
		}
		var res extenderv1.ExtenderFilterResult
		return &res, json.NewDecoder(resp.Body).Decode(&res)
	}
	attackBody := []byte(extenderArgs(b, attack, names...))
	healthyBody := []byte(extenderArgs(b, util.MakePod("healthy").GPUMem(6).Obj(), names...))

	stop := make(chan struct{})
	var attackers sync.WaitGroup
	var attackLat util.Latencies
	var attacks, attackFits atomic.Int64
	var lastAttack atomic.Value // one answer's first failure reason
	for range 4 {
		attackers.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				res, err := filter(attackBody)
				attackLat.Add(time.Since(start))
				attacks.Add(1)
				if err == nil && res.NodeNames != nil {
					attackFits.Add(int64(len(*res.NodeNames)))
					for _, r := range res.FailedNodes {
						lastAttack.Store(r)
						break
					}
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond) // the attackers are busy
	var healthy util.Latencies
	failed := 0
	b.ResetTimer()
	for b.Loop() {
		start := time.Now()
		res, err := filter(healthyBody)
		healthy.Add(time.Since(start))
		if err != nil || res.Error != "" || res.NodeNames == nil || len(*res.NodeNames) == 0 {
			failed++
		}
	}
	b.StopTimer()
	close(stop)
	attackers.Wait()
	if failed > 0 {
		b.Errorf("%d healthy filters failed or passed no node", failed)
	}
	b.ReportMetric(float64(healthy.Quantile(0.99).Microseconds())/1000, "healthy-p99-ms")
	b.ReportMetric(float64(attackLat.Quantile(1).Microseconds())/1000, "attack-max-ms")
	b.ReportMetric(float64(attacks.Load()), "attacks")
	b.ReportMetric(float64(attackFits.Load())/float64(max(1, attacks.Load())), "attack-nodes-passed")
	if r, ok := lastAttack.Load().(string); ok {
		b.Logf("an attacker's answer names nodes failed like: %s", r)
	}
}

// startBenchServer serves f's handler over real HTTP with the extender's
// own server settings (newServer), as the benchmarks' clients reach it.
func startBenchServer(ctx context.Context, f *fixture) *httptest.Server {
	srv := httptest.NewUnstartedServer(f.handler)
	srv.Config = newServer(ctx, f.handler, Timeouts{})
	srv.Start()
	return srv
}
