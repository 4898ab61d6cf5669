package preemption

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/feed"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/pkg/preemption/planner"
	"github.com/gpushare/gpushare/test/util"
)

// writes records the nominations and evictions a preemptor sends.
type writes struct {
	mu    sync.Mutex
	calls []string
}

func (w *writes) add(call string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, call)
	return nil
}

func (w *writes) Nominate(_ context.Context, _, name string, _ types.UID, node string) error {
	return w.add("nominate " + name + " to " + node)
}

func (w *writes) Evict(_ context.Context, _, name string, _ types.UID) error {
	return w.add("evict " + name)
}

func (w *writes) recorded() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.calls...)
}

// fixture is a started Preemptor over a fake API holding objs, its
// informers synced.
type fixture struct {
	cache     *cache.Cache
	preemptor *Preemptor
}

func preemptFixture(tb testing.TB, objs ...runtime.Object) (*fixture, *writes) {
	tb.Helper()
	// A benchmark's *testing.B may not log.
	logger, ctx := klog.Logger{}, context.Background()
	if t, ok := tb.(*testing.T); ok {
		logger, ctx = ktesting.NewTestContext(t)
	}
	ctx, cancel := context.WithCancel(ctx)
	tb.Cleanup(cancel)
	client := fake.NewClientset(objs...)
	c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		tb.Fatal(err)
	}
	feeder, err := feed.New(ctx, c, client)
	if err != nil {
		tb.Fatal(err)
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	api := &writes{}
	p, err := New(logger, Config{Cache: c, API: api, Pods: feeder, Nodes: feeder, Budgets: factory.Policy().V1().PodDisruptionBudgets()})
	if err != nil {
		tb.Fatal(err)
	}
	feeder.Start(ctx)
	factory.Start(ctx.Done())
	p.Start(ctx)
	if !feeder.WaitForSync(ctx) || !toolscache.WaitForCacheSync(ctx.Done(), p.Synced) {
		tb.Fatal("not synced")
	}
	return &fixture{cache: c, preemptor: p}, api
}

// victimsFor is what p hands PlanPreemption for one plan.
func victimsFor(p *Preemptor) planner.Victims { return p.victims.forPlan() }

// oneCard is an allocation of units on card 0 of node.
func oneCard(node string, units int64) *gpushare.Allocation {
	return &gpushare.Allocation{Node: node, Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, UUID: "GPU-" + node + "-0", Units: units}}}}}
}

// TestEvictionsStopWhenTheRoomIsGone (review D8): the workers send no
// nomination or eviction for room the pod no longer holds on the plan's
// node (released, expired, or taken by its bind).
func TestEvictionsStopWhenTheRoomIsGone(t *testing.T) {
	a := util.MakePod("a").GPUMem(8).Node("one").Allocation(oneCard("one", 8)).Obj()
	b := util.MakePod("b").GPUMem(8).Node("one").Allocation(oneCard("one", 8)).Obj()
	for _, tc := range []struct {
		name string
		gone func(f *fixture, plan *planner.Plan)
	}{
		{"released", func(f *fixture, plan *planner.Plan) { f.cache.Release(plan.UID) }},
		{"taken by the pod's bind on another node", func(f *fixture, plan *planner.Plan) {
			pod := kubeinfo.NewPodInfo(util.MakePod("high").GPUMem(16).Priority(1000).Obj())
			if _, err := f.cache.Assume(context.Background(), pod, "two"); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, api := preemptFixture(t, util.MakeNode("one").Cards("Tesla-T4", 16).Obj(), util.MakeNode("two").Cards("Tesla-T4", 16).Obj(), a, b)
			high := kubeinfo.NewPodInfo(util.MakePod("high").GPUMem(16).Priority(1000).Obj())
			plan, err := f.cache.PlanPreemption(context.Background(), high, []string{"one"}, victimsFor(f.preemptor))
			if err != nil || plan == nil {
				t.Fatalf("PlanPreemption = %v, %v", plan, err)
			}
			if err := f.cache.Reserve(plan, time.Minute); err != nil {
				t.Fatal(err)
			}
			tc.gone(f, plan)
			f.preemptor.execute(context.Background(), plan)
			if diff := cmp.Diff([]string(nil), api.recorded()); diff != "" {
				t.Errorf("API writes (-want +got):\n%s", diff)
			}
		})
	}
}

// BenchmarkPlanUnschedulable is one plan (off filter's reply) for the pod
// of priority 1000 of pkg/extender's unschedulableCases over
// util.PreemptionCluster: it asks about every pod of the 500 nodes and
// finds nothing.
func BenchmarkPlanUnschedulable(b *testing.B) {
	objs, names := util.PreemptionCluster()
	f, _ := preemptFixture(b, objs...)
	pod := kubeinfo.NewPodInfo(util.MakePod("pending").GPUMem(17).Priority(1000).GPUModels("A10").Obj())
	b.ReportAllocs()
	for b.Loop() {
		plan, err := f.cache.PlanPreemption(context.Background(), pod, names, f.preemptor.victims.forPlan())
		if plan != nil || err != nil {
			b.Fatalf("PlanPreemption = %v, %v; want no plan", plan, err)
		}
	}
}
