package extender

import (
	"bytes"
	"context"
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

	apiruntime "k8s.io/apimachinery/pkg/runtime"

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
	srv := httptest.NewUnstartedServer(f.handler)
	srv.Config = newServer(ctx, f.handler, Timeouts{})
	srv.Start()
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
