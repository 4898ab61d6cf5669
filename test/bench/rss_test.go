package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/integration/extenders"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// TestExtenderRSS measures the extender binary's resident memory after it
// has loaded 15,000 nodes (8 cards each) and 120,000 bound GPU pods from a
// real API server (GPUSHARE_BENCH_RSS_NODES and GPUSHARE_BENCH_RSS_PODS_PER_NODE
// change the sizes). It is a measurement, not an assertion: it runs only
// with GPUSHARE_BENCH=1 (make bench) and logs the figure; issue 26's budget
// is 400 MiB at the default sizes. With GPUSHARE_BENCH_BASE_EXTENDER set to
// another tree's extender binary, that one is measured too, after ours,
// against the same API server (".../base"). With GPUSHARE_BENCH_PROFILE_DIR
// set, a heap profile of each is written there (extender-heap[-base].pprof;
// go tool pprof reads it).
func TestExtenderRSS(t *testing.T) {
	if os.Getenv("GPUSHARE_BENCH") != "1" {
		t.Skip("a measurement: run with GPUSHARE_BENCH=1 (make bench)")
	}
	nodes, podsPerNode := envInt(t, "GPUSHARE_BENCH_RSS_NODES", 15000), envInt(t, "GPUSHARE_BENCH_RSS_PODS_PER_NODE", 8)
	cp := framework.StartT(t, framework.Options{})
	admin := cp.Client(framework.AdminUser)
	ctx := context.Background()

	start := time.Now()
	framework.Parallel(t, nodes, func(i int) error {
		return framework.CreateNode(ctx, admin, util.MakeNode(fmt.Sprintf("node-%05d", i)).Cards("V100", 32, 32, 32, 32, 32, 32, 32, 32).Obj())
	})
	framework.Parallel(t, nodes*podsPerNode, func(i int) error {
		node := fmt.Sprintf("node-%05d", i/podsPerNode)
		a := &gpushare.Allocation{Node: node, Unit: "GiB", Containers: []gpushare.ContainerAllocation{
			{Name: "c0", Devices: []gpushare.DeviceShare{{Index: i % 8, UUID: fmt.Sprintf("GPU-%s-%d", node, i%8), Units: 4}}},
		}}
		p := util.MakePod(fmt.Sprintf("pod-%06d", i)).GPUMem(4).Allocation(a).Node(node).Obj()
		p.UID = ""
		p.Labels = map[string]string{"app": "train", "team": fmt.Sprintf("team-%d", i%50)}
		p.Spec.Containers[0].Command = []string{"python", "train.py", "--epochs=100"}
		_, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		return err
	})
	t.Logf("created %d nodes and %d pods in %v", nodes, nodes*podsPerNode, time.Since(start).Round(time.Second))

	bins := []struct{ name, path string }{{"", extenders.Build(t)}}
	if base := os.Getenv("GPUSHARE_BENCH_BASE_EXTENDER"); base != "" {
		// A baseline tree's extender against the same API server, one
		// after the other: old and new side by side from one run.
		bins = append(bins, struct{ name, path string }{"/base", base})
	}
	for _, b := range bins {
		addr := util.FreeAddr(t)
		args := []string{"--kubeconfig", cp.AdminKubeconfig(), "--listen", addr}
		profileDir, metricsAddr := os.Getenv("GPUSHARE_BENCH_PROFILE_DIR"), ""
		if profileDir != "" {
			metricsAddr = util.FreeAddr(t)
			args = append(args, "--metrics-listen", metricsAddr, "--profiling")
		}
		pid, stop := startExtender(t, b.path, args...)
		loadStart := time.Now()
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Minute, true, func(context.Context) (bool, error) {
			return metric(addr, "gpushare_extender_pods") == fmt.Sprint(nodes*podsPerNode), nil
		})
		if err != nil {
			t.Fatalf("extender %s did not load every pod: pods gauge %q", b.path, metric(addr, "gpushare_extender_pods"))
		}
		loaded := time.Since(loadStart)
		time.Sleep(5 * time.Second) // let the initial-list garbage be collected
		rss := vmRSS(t, pid)
		heap := goHeap(addr)
		if profileDir != "" {
			path := filepath.Join(profileDir, "extender-heap"+strings.ReplaceAll(b.name, "/", "-")+".pprof")
			if err := saveHeapProfile(metricsAddr, path); err != nil {
				t.Errorf("heap profile of the extender: %v", err)
			} else {
				t.Logf("heap profile of the extender: %s", path)
			}
		}
		stop()
		t.Logf("extender %s RSS after loading %d nodes and %d pods: %d MiB (loaded in %v); Go heap: %s", b.path, nodes, nodes*podsPerNode, rss>>10, loaded.Round(100*time.Millisecond), heap)
		fmt.Printf("BenchmarkExtenderRSS/nodes=%d/pods=%d%s\t1\t%d RSS-MiB\t%.1f load-s\n", nodes, nodes*podsPerNode, b.name, rss>>10, loaded.Seconds())
	}
}

// saveHeapProfile writes the heap profile the extender serves at addr
// (--profiling), taken after a collection, to path.
func saveHeapProfile(addr, path string) error {
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap?gc=1")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET heap profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	return errors.Join(err, f.Close())
}

// goHeap returns the extender's Go memory figures from its /metrics, in
// MiB: the live heap (objects reachable or not yet swept), the heap's
// spans in use, the goal of the next collection, and all the runtime
// holds from the OS; what RSS counts beyond the heap in use is what the
// runtime has not returned yet.
func goHeap(addr string) string {
	var parts []string
	for _, m := range []struct{ name, metric string }{
		{"allocated", "go_memstats_heap_alloc_bytes"},
		{"in use", "go_memstats_heap_inuse_bytes"},
		{"next GC at", "go_memstats_next_gc_bytes"},
		{"from the OS", "go_memstats_sys_bytes"},
	} {
		v, err := strconv.ParseFloat(metric(addr, m.metric), 64)
		if err != nil {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f MiB", m.name, v/(1<<20)))
	}
	return strings.Join(parts, ", ")
}

// metric returns the value of an unlabelled metric on the extender's /metrics.
func metric(addr, name string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	return ""
}

// vmRSS returns a process's resident set in KiB.
func vmRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kib
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
