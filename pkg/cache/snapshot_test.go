package cache

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache/internal/view"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/util"
)

// TestReadersSeeEveryChange: after each kind of change, what the readers
// see without the lock (checkPublished) is the cache's state.
func TestReadersSeeEveryChange(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	c := newCache(t, clk)
	alloc := &gpushare.Allocation{Node: "n1", Unit: "GiB", Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 1, Units: 4}}}}}
	web := util.MakePod("web").UID("uid-web").Requests("2", "1Gi")
	steps := []struct {
		name string
		do   func()
	}{
		{"a node", func() { _ = c.SetNode(util.MakeNode("n1").Host("16", "64Gi").Cards("T4", 16, 16).Obj()) }},
		{"a second node", func() { _ = c.SetNode(util.MakeNode("n2").Host("8", "32Gi").Cards("T4", 16).Obj()) }},
		{"a pod without GPU memory bound to it", func() { c.UpsertPod(web.Node("n1").Obj()) }},
		{"that pod deleted", func() { c.DeletePod("uid-web") }},
		{"a GPU pod bound with its annotation", func() {
			c.UpsertPod(util.MakePod("a").UID("uid-a").GPUMem(4).Requests("1", "1Gi").Allocation(alloc).Node("n1").Obj())
		}},
		{"a bind's assumption", func() {
			_, _ = c.Assume(context.Background(), kubeinfo.NewPodInfo(util.MakePod("b").UID("uid-b").GPUMem(8).Requests("1", "1Gi").Obj()), "n2")
		}},
		{"forgotten", func() { c.Forget("uid-b") }},
		{"assumed again and bound", func() {
			_, _ = c.Assume(context.Background(), kubeinfo.NewPodInfo(util.MakePod("b").UID("uid-b").GPUMem(8).Obj()), "n2")
			c.FinishBinding("uid-b")
		}},
		{"expired unconfirmed", func() { clk.Step(time.Hour); c.Expire() }},
		{"a node's cards change", func() { _ = c.SetNode(util.MakeNode("n1").Host("16", "64Gi").Cards("T4", 16, 16, 16).Obj()) }},
		{"the GPU pod finished", func() {
			p := util.MakePod("a").UID("uid-a").GPUMem(4).Allocation(alloc).Node("n1").Obj()
			p.Status.Phase = corev1.PodSucceeded
			c.UpsertPod(p)
		}},
		{"a node deleted", func() { c.DeleteNode("n2") }},
	}
	for _, s := range steps {
		s.do()
		t.Run(s.name, func(t *testing.T) { checkPublished(t, c) })
	}
}

// TestReadersTakeNoLock: filter, prioritize and their CPU-only form answer
// while the cache's lock is held (by an informer event or a bind in the
// real extender): they read the published copies only.
func TestReadersTakeNoLock(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	if err := c.SetNode(util.MakeNode("n1").Host("16", "64Gi").Cards("T4", 16, 16).Obj()); err != nil {
		t.Fatal(err)
	}
	pod := kubeinfo.NewPodInfo(util.MakePod("p").GPUMem(4).Obj())
	cpu := kubeinfo.NewPodInfo(util.MakePod("c").Requests("1", "1Gi").Obj())
	ctx := context.Background()
	verbs := map[string]func() error{
		"Filter":     func() error { _, _, err := c.Filter(ctx, pod, []string{"n1"}); return err },
		"FilterBest": func() error { _, _, err := c.FilterBest(ctx, pod, []string{"n1"}); return err },
		"Score":      func() error { _, err := c.Score(ctx, pod, []string{"n1"}); return err },
		"ScoreCPU":   func() error { _, err := c.ScoreCPU(ctx, cpu, []string{"n1"}); return err },
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, verb := range verbs {
		done := make(chan error, 1)
		go func() { done <- verb() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s still waits after 30 s while the cache's lock is held", name)
		}
	}
}

// TestAssumeUnderChurn: binds choosing cards on their nodes' published
// copies while informer events change those nodes never over-commit a
// card: a choice made on a copy that changed meanwhile is made again.
func TestAssumeUnderChurn(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	nodes := []string{"n1", "n2"}
	for _, n := range nodes {
		if err := c.SetNode(util.MakeNode(n).Cards("T4", 16, 16, 16, 16).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 50 {
				pod := kubeinfo.NewPodInfo(util.MakePod(fmt.Sprintf("b%d-%d", w, i)).UID(fmt.Sprintf("b%d-%d", w, i)).GPUMem(int64(1 + (i+w)%5)).Obj())
				_, _ = c.Assume(context.Background(), pod, nodes[i%2])
				if i%3 == 0 {
					c.Forget(pod.UID)
				}
			}
		})
	}
	wg.Go(func() {
		// Bound pods the informer delivers, charged by their
		// annotations whatever the binds chose.
		for i := range 100 {
			n := nodes[i%2]
			a := &gpushare.Allocation{Node: n, Unit: "GiB", Containers: []gpushare.ContainerAllocation{
				{Name: "c0", Devices: []gpushare.DeviceShare{{Index: i % 4, Units: 1}}}}}
			uid := fmt.Sprintf("inf-%d", i)
			c.UpsertPod(util.MakePod(uid).UID(uid).GPUMem(1).Allocation(a).Node(n).Obj())
			if i%2 == 0 {
				c.DeletePod(k8stypes.UID(uid))
			}
		}
	})
	wg.Wait()
	// What the binds hold never exceeds a card: with the informer's pods
	// gone, each card holds only assumed pods, which Assume placed.
	for i := range 100 {
		c.DeletePod(k8stypes.UID(fmt.Sprintf("inf-%d", i)))
	}
	for _, n := range nodes {
		for i, u := range used(t, c, n) {
			if u > 16 {
				t.Errorf("node %s card %d holds %d of 16 GiB", n, i, u)
			}
		}
	}
}

// TestVerbsStopWithTheirContext: once a request's context has ended (its
// deadline passed, or kube-scheduler gave up), filter and prioritize stop
// walking the nodes and fail, naming the pod and how far they got.
func TestVerbsStopWithTheirContext(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	var names []string
	for i := range 300 {
		names = append(names, fmt.Sprintf("n%03d", i))
		if err := c.SetNode(util.MakeNode(names[i]).Cards("T4", 16).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	pod := kubeinfo.NewPodInfo(util.MakePod("p").GPUMem(4).Obj())
	for name, verb := range map[string]func() error{
		"Filter":     func() error { _, _, err := c.Filter(ctx, pod, names); return err },
		"FilterBest": func() error { _, _, err := c.FilterBest(ctx, pod, names); return err },
		"Score":      func() error { _, err := c.Score(ctx, pod, names); return err },
		"ScoreCPU": func() error {
			_, err := c.ScoreCPU(ctx, kubeinfo.NewPodInfo(util.MakePod("c").Annotation(gpushare.AnnotationPolicy, "fragaware").Obj()), names)
			return err
		},
	} {
		// Each verb looks at its context every ctxCheckNodes nodes (the
		// fitting verbs between blocks of fitBlock): it stops at the first
		// look, having examined fewer than ctxCheckNodes+fitBlock.
		err := verb()
		m := regexp.MustCompile(`pod default/[pc]: stopped after (\d+) of 300 nodes`).FindStringSubmatch(fmt.Sprint(err))
		if !errors.Is(err, context.Canceled) || m == nil {
			t.Errorf("%s with its context ended = %v, want it stopped after fewer than 300 nodes", name, err)
			continue
		}
		if done, _ := strconv.Atoi(m[1]); done < view.CtxCheckNodes-1 || done >= view.CtxCheckNodes+view.FitBlock {
			t.Errorf("%s with its context ended stopped after %d nodes, want its first look, after %d..%d", name, done, view.CtxCheckNodes-1, view.CtxCheckNodes+view.FitBlock-1)
		}
	}
}

// TestParallelVerbsStopWithTheirContext is TestVerbsStopWithTheirContext
// for a list long enough for several goroutines: each looks at the context
// before every chunk it takes, so they stop at their first.
func TestParallelVerbsStopWithTheirContext(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	var names []string
	for i := range 2 * view.ParallelMinNodes {
		names = append(names, fmt.Sprintf("n%04d", i))
		if err := c.SetNode(util.MakeNode(names[i]).Cards("T4", 16).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err := c.FilterBest(ctx, kubeinfo.NewPodInfo(util.MakePod("p").GPUMem(4).Obj()), names)
	m := regexp.MustCompile(`pod default/p: stopped after (\d+) of 2048 nodes`).FindStringSubmatch(fmt.Sprint(err))
	if !errors.Is(err, context.Canceled) || m == nil {
		t.Fatalf("FilterBest with its context ended = %v, want it stopped after fewer than 2048 nodes", err)
	}
	if done, _ := strconv.Atoi(m[1]); done >= 2*view.ParallelChunk {
		t.Errorf("FilterBest with its context ended stopped after %d nodes, want its goroutines' first looks, before %d", done, 2*view.ParallelChunk)
	}
}

// TestFilterBestPassesAtMostMaxBestNodes: of 250 equally good nodes the
// filter passes the first allocator.MaxBestNodes, in the order
// kube-scheduler sent them (it rotates that order from cycle to cycle).
func TestFilterBestPassesAtMostMaxBestNodes(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	var names []string
	for i := range 250 {
		names = append(names, fmt.Sprintf("n%03d", i))
		if err := c.SetNode(util.MakeNode(names[i]).Cards("T4", 16).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	rotated := append(slices.Clone(names[170:]), names[:170]...)
	best, failed, err := c.FilterBest(context.Background(), kubeinfo.NewPodInfo(util.MakePod("p").GPUMem(4).Obj()), rotated)
	if err != nil || len(failed) > 0 {
		t.Fatalf("FilterBest: %v, failed %v", err, failed)
	}
	if diff := cmp.Diff(rotated[:allocator.MaxBestNodes], best); diff != "" {
		t.Errorf("nodes passed (-want +got):\n%s", diff)
	}
}

// TestParallelScoringMatchesSequential: the goroutines that fit a
// single-card pod over a long node list answer exactly what one would: the
// same nodes fit, with the same scores and reasons.
func TestParallelScoringMatchesSequential(t *testing.T) {
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	var names []string
	for i := range 3 * view.ParallelMinNodes {
		names = append(names, fmt.Sprintf("n%04d", i))
		if err := c.SetNode(util.MakeNode(names[i]).Host("32", "128Gi").Cards("T4", 16, 16, 16, 16).Obj()); err != nil {
			t.Fatal(err)
		}
		used := int64(i % 17)
		if used > 0 {
			a := &gpushare.Allocation{Node: names[i], Unit: "GiB", Containers: []gpushare.ContainerAllocation{
				{Name: "c0", Devices: []gpushare.DeviceShare{{Index: i % 4, Units: min(used, 16)}}}}}
			c.UpsertPod(util.MakePod(fmt.Sprintf("p%d", i)).GPUMem(min(used, 16)).Requests(fmt.Sprint(1+i%9), "1Gi").Allocation(a).Node(names[i]).Obj())
		}
	}
	names = append(names, "unknown") // fails, with its reason
	pod := kubeinfo.NewPodInfo(util.MakePod("q").GPUMem(8).Requests("2", "4Gi").Annotation(gpushare.AnnotationPolicy, "fragaware").Obj())
	run := func(procs int) ([]float64, []bool, map[string]string) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		raw, fits, failed, err := c.view.Evaluate(context.Background(), pod, names)
		if err != nil {
			t.Fatal(err)
		}
		return raw, fits, failed
	}
	s1, f1, r1 := run(1)
	s4, f4, r4 := run(4)
	if diff := cmp.Diff(s1, s4); diff != "" {
		t.Errorf("raw scores (-1 goroutine +several):\n%s", diff)
	}
	if diff := cmp.Diff(f1, f4); diff != "" {
		t.Errorf("fits (-1 goroutine +several):\n%s", diff)
	}
	if diff := cmp.Diff(r1, r4); diff != "" || len(r1) == 0 {
		t.Errorf("failed nodes (-1 goroutine +several), %d of them:\n%s", len(r1), diff)
	}
}
