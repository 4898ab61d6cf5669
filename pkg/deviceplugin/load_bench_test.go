package deviceplugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/util"
)

// allocateBurst is how many Allocate calls one burst sends at once: a node
// starting 64 one-GiB containers together.
const allocateBurst = 64

// BenchmarkAllocateBurst: bursts of allocateBurst concurrent Allocate calls
// over the plugin's real gRPC unix socket (the endpoint registered with a
// fake kubelet), each for another waiting 1 GiB container on the 80 GiB
// card, matched by the real Handoff. One op is one burst; between bursts
// the pods are replaced. Reports each call's p99 latency (ms) and the heap
// after the run less the heap before it (MiB, after a GC each).
func BenchmarkAllocateBurst(b *testing.B) {
	dir, err := os.MkdirTemp("", "dp") // unix socket paths are short
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	f := &fakeRegistration{got: make(chan *pluginapi.RegisterRequest, 1)}
	serveRegistration(b, filepath.Join(dir, "kubelet.sock"), f)
	h := handoff.New(handoff.Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards, Kubelet: &fakeKubelet{}})
	ep := &Endpoint{Dir: dir, Server: NewServer(klog.Background().V(1), h, testCards, gpushare.UnitGiB, StrategyEnvvar, nil)}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().V(1)))
	done := make(chan error, 1)
	go func() { done <- ep.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("Run = %v", err)
		}
	}()
	select {
	case <-f.got:
	case <-time.After(30 * time.Second):
		b.Fatal("the plugin never registered")
	}
	conn, err := dial(filepath.Join(dir, SocketName))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	client := pluginapi.NewDevicePluginClient(conn)

	// pods adds a burst's waiting pods (1 GiB each on card 2, bound at
	// second round) and returns their UIDs.
	pods := func(round int) []string {
		uids := make([]string, allocateBurst)
		for i := range uids {
			uids[i] = fmt.Sprintf("uid-%d-%d", round, i)
			a := &gpushare.Allocation{Node: "n1", Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
				{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 2, UUID: "GPU-2", Units: 1}}}}}
			h.UpsertPod(util.MakePod(uids[i]).UID(uids[i]).GPUMem(1).Node("n1").Allocation(a).
				Annotation(gpushare.AnnotationAssumeTime, strconv.Itoa(round*1e9+i)).Obj())
		}
		return uids
	}
	latencies := new(util.Latencies) // before the heap is measured: fixed size
	var heapBefore, heapAfter runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&heapBefore)
	round := 0
	uids := pods(round)
	b.ResetTimer()
	for b.Loop() {
		var wg sync.WaitGroup
		errs := make(chan error, allocateBurst)
		for k := range allocateBurst {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				_, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
					{DevicesIds: []string{handoff.DeviceID("GPU-2", int64(k))}}}})
				d := time.Since(start)
				if err != nil {
					errs <- err
					return
				}
				latencies.Add(d)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatalf("Allocate: %v", err)
		}
		b.StopTimer()
		for _, uid := range uids {
			h.DeletePod(types.UID(uid))
		}
		round++
		uids = pods(round)
		b.StartTimer()
	}
	b.StopTimer()
	for _, uid := range uids {
		h.DeletePod(types.UID(uid))
	}
	runtime.GC()
	runtime.ReadMemStats(&heapAfter)
	b.ReportMetric(float64(latencies.Quantile(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(int64(heapAfter.HeapAlloc)-int64(heapBefore.HeapAlloc))/(1<<20), "heap-growth-MiB")
}
