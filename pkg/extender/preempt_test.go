package extender

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	policyinformers "k8s.io/client-go/informers/policy/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/preemption"
	"github.com/gpushare/gpushare/test/util"
)

// fakePreemptAPI records a preemption's writes and fails evictions as told.
type fakePreemptAPI struct {
	mu    sync.Mutex
	calls []string
	// evictErr: victim name -> the error its eviction returns.
	evictErr map[string]error
}

func (f *fakePreemptAPI) Nominate(_ context.Context, _, name string, _ types.UID, node string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "nominate "+name+" to "+node)
	return nil
}

func (f *fakePreemptAPI) Evict(_ context.Context, _, name string, _ types.UID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "evict "+name)
	return f.evictErr[name]
}

func (f *fakePreemptAPI) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// preemptFixture is newFixture with a Preemptor writing to a fakePreemptAPI.
// Node sick has one healthy 16 GiB card holding pod halfsick (9 GiB,
// priority 0).
func preemptFixture(t *testing.T, objs ...runtime.Object) (*fixture, *fakePreemptAPI) {
	t.Helper()
	f := newFixture(t, objs...)
	api := &fakePreemptAPI{evictErr: map[string]error{}}
	startPreemptor(t, f, api)
	return f, api
}

// settle waits until f's preemptor plans nothing: no pod is queued or
// being planned.
func settle(tb testing.TB, f *fixture) {
	tb.Helper()
	if f.preemptor == nil {
		return
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return f.preemptor.Idle(), nil
	}); err != nil {
		tb.Fatal("the preemptor is still planning after a minute")
	}
}

// startPreemptor gives f's handlers a started Preemptor writing to api,
// once its PodDisruptionBudget informer has synced.
func startPreemptor(tb testing.TB, f *fixture, api preemption.API) {
	tb.Helper()
	startPreemptorWith(tb, f, api, nil)
}

// startPreemptorWith is startPreemptor whose preemptor reads the budgets
// through wrap's lister (nil: the informer's).
func startPreemptorWith(tb testing.TB, f *fixture, api preemption.API, wrap func(policylisters.PodDisruptionBudgetLister) policylisters.PodDisruptionBudgetLister) {
	tb.Helper()
	logger := klog.Logger{} // a benchmark's *testing.B may not log
	if t, ok := tb.(*testing.T); ok {
		logger = ktestingLogger(t)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	factory := informers.NewSharedInformerFactory(f.client, 0)
	budgets := factory.Policy().V1().PodDisruptionBudgets()
	if wrap != nil {
		budgets = wrappedBudgets{PodDisruptionBudgetInformer: budgets, lister: wrap(budgets.Lister())}
	}
	p, err := preemption.New(logger, preemption.Config{Cache: f.cache, API: api, Pods: f.feeder, Nodes: f.feeder, Budgets: budgets})
	if err != nil {
		tb.Fatal(err)
	}
	factory.Start(ctx.Done())
	p.Start(ctx)
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return p.Synced(), nil
	}); err != nil {
		tb.Fatal("the PodDisruptionBudget informer never synced")
	}
	f.preemptor, f.preemptAPI = p, api
	f.configure(tb, func(c *HandlersConfig) { c.Preempt = p })
}

// wrappedBudgets is a PodDisruptionBudget informer with another lister.
type wrappedBudgets struct {
	policyinformers.PodDisruptionBudgetInformer
	lister policylisters.PodDisruptionBudgetLister
}

func (w wrappedBudgets) Lister() policylisters.PodDisruptionBudgetLister { return w.lister }

func eventuallyCalls(t *testing.T, api *fakePreemptAPI, want []string) {
	t.Helper()
	var got []string
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		got = api.recorded()
		return len(got) >= len(want), nil
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("API writes (-want +got):\n%s", diff)
	}
}

func TestFilterStartsAPreemption(t *testing.T) {
	f, api := preemptFixture(t)
	high := util.MakePod("high").GPUMem(14).Priority(1000).Obj()
	code, body := f.do(t, "POST", Prefix+"/filter", extenderArgs(t, high, "sick"))
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal([]byte(body), &res); code != http.StatusOK || err != nil || len(*res.NodeNames) != 0 {
		t.Fatalf("filter = %d %s", code, body)
	}
	// The plan is made after the answer: the evictions follow it.
	eventuallyCalls(t, api, []string{"nominate high to sick", "evict halfsick"})
	if node, ok := f.cache.Reserved(high.UID); !ok || node != "sick" {
		t.Errorf("Reserved = %q, %v; want sick", node, ok)
	}

	// Its next cycles plan nothing more, by filter or by preempt.
	f.do(t, "POST", Prefix+"/filter", extenderArgs(t, high, "sick"))
	if got := preemptVerb(t, f, high, map[string][]string{"sick": {"uid-halfsick"}}); len(got) != 0 {
		t.Errorf("preempt verb during the preemption = %v, want no node", got)
	}
	time.Sleep(50 * time.Millisecond)
	if got := api.recorded(); len(got) != 2 {
		t.Errorf("API writes after the pod's next cycles: %v", got)
	}
}

func TestFilterPreemptsNobodyFor(t *testing.T) {
	tests := []struct {
		name  string
		pod   *corev1.Pod
		nodes []string
	}{
		{"a pod of equal priority", util.MakePod("same").GPUMem(14).Obj(), []string{"sick"}},
		{"a pod that never preempts", util.MakePod("never").GPUMem(14).Priority(1000).PreemptNever().Obj(), []string{"sick"}},
		{"a pod no card can hold", util.MakePod("huge").GPUMem(17).Priority(1000).Obj(), []string{"sick"}},
		{"kube-scheduler's trial of the nominated node alone", nominated(util.MakePod("nom").GPUMem(14).Priority(1000).Obj(), "sick"), []string{"sick"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, api := preemptFixture(t)
			f.do(t, "POST", Prefix+"/filter", extenderArgs(t, tc.pod, tc.nodes...))
			if _, ok := f.cache.Reserved(tc.pod.UID); ok {
				t.Error("room reserved")
			}
			time.Sleep(50 * time.Millisecond)
			if got := api.recorded(); len(got) != 0 {
				t.Errorf("API writes: %v", got)
			}
		})
	}
}

func nominated(p *corev1.Pod, node string) *corev1.Pod {
	p.Status.NominatedNodeName = node
	return p
}

// preemptVerb sends the preempt verb as kube-scheduler (nodeCacheCapable)
// does and returns the victims' UIDs by node.
func preemptVerb(t *testing.T, f *fixture, pod *corev1.Pod, candidates map[string][]string) map[string][]string {
	t.Helper()
	args := extenderv1.ExtenderPreemptionArgs{Pod: pod, NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}}
	for n, uids := range candidates {
		mv := &extenderv1.MetaVictims{}
		for _, u := range uids {
			mv.Pods = append(mv.Pods, &extenderv1.MetaPod{UID: u})
		}
		args.NodeNameToMetaVictims[n] = mv
	}
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	code, body := f.do(t, "POST", Prefix+"/preempt", string(b))
	if code != http.StatusOK {
		t.Fatalf("preempt = %d %s", code, body)
	}
	var res extenderv1.ExtenderPreemptionResult
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for n, mv := range res.NodeNameToMetaVictims {
		out[n] = []string{}
		for _, p := range mv.Pods {
			out[n] = append(out[n], p.UID)
		}
	}
	return out
}

func TestPreemptVerb(t *testing.T) {
	t.Run("kube-scheduler's victims by node totals are refused; the extender evicts per card", func(t *testing.T) {
		f, api := preemptFixture(t)
		high := util.MakePod("high").GPUMem(14).Priority(1000).Obj()
		if got := preemptVerb(t, f, high, map[string][]string{"sick": {"uid-halfsick"}}); len(got) != 0 {
			t.Errorf("preempt = %v, want no node", got)
		}
		eventuallyCalls(t, api, []string{"nominate high to sick", "evict halfsick"})
	})
	t.Run("no card can be freed: nobody is evicted", func(t *testing.T) {
		f, api := preemptFixture(t)
		huge := util.MakePod("huge").GPUMem(17).Priority(1000).Obj()
		if got := preemptVerb(t, f, huge, map[string][]string{"sick": {"uid-halfsick"}}); len(got) != 0 {
			t.Errorf("preempt = %v, want no node", got)
		}
		time.Sleep(50 * time.Millisecond)
		if got := api.recorded(); len(got) != 0 {
			t.Errorf("API writes: %v", got)
		}
	})
	t.Run("the cards fit: kube-scheduler evicts for the other resources, the cards held", func(t *testing.T) {
		f, api := preemptFixture(t)
		small := util.MakePod("small").GPUMem(4).Priority(1000).Obj()
		got := preemptVerb(t, f, small, map[string][]string{"sick": {"uid-halfsick"}, "mixed": {"uid-a", "uid-b"}})
		if diff := cmp.Diff(map[string][]string{"sick": {"uid-halfsick"}}, got); diff != "" {
			t.Errorf("preempt (-want +got):\n%s", diff)
		}
		if node, ok := f.cache.Reserved(small.UID); !ok || node != "sick" {
			t.Errorf("Reserved = %q, %v; want sick", node, ok)
		}
		if got := api.recorded(); len(got) != 0 {
			t.Errorf("API writes: %v", got)
		}
	})
	t.Run("without a preemptor nobody is evicted", func(t *testing.T) {
		f := newFixture(t)
		high := util.MakePod("high").GPUMem(14).Priority(1000).Obj()
		if got := preemptVerb(t, f, high, map[string][]string{"sick": {"uid-halfsick"}}); len(got) != 0 {
			t.Errorf("preempt = %v, want no node", got)
		}
	})
}

func TestEvictionRefusedReleasesTheRoom(t *testing.T) {
	// Two 8 GiB pods on one 16 GiB card; the second's eviction is refused.
	a := util.MakePod("a").GPUMem(8).Node("one").Allocation(oneCard("one", 8)).Priority(1).Obj()
	b := util.MakePod("b").GPUMem(8).Node("one").Allocation(oneCard("one", 8)).Priority(0).Obj()
	f, api := preemptFixture(t, util.MakeNode("one").Cards("Tesla-T4", 16).Obj(), a, b)
	api.evictErr["a"] = apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
	high := util.MakePod("high").GPUMem(16).Priority(1000).Obj()
	f.do(t, "POST", Prefix+"/filter", extenderArgs(t, high, "one"))
	eventuallyCalls(t, api, []string{"nominate high to one", "evict a", "nominate high to "})
	if _, ok := f.cache.Reserved(high.UID); ok {
		t.Error("the room is still reserved after a refused eviction")
	}
	// A victim already gone does not stop it.
	api2 := &fakePreemptAPI{evictErr: map[string]error{"a": apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "a")}}
	startPreemptor(t, f, api2)
	f.do(t, "POST", Prefix+"/filter", extenderArgs(t, high, "one"))
	eventuallyCalls(t, api2, []string{"nominate high to one", "evict a", "evict b"})
	if _, ok := f.cache.Reserved(high.UID); !ok {
		t.Error("the room was released though every victim is gone")
	}
}

// oneCard is an allocation of units on card 0 of node.
func oneCard(node string, units int64) *gpushare.Allocation {
	return &gpushare.Allocation{Node: node, Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, UUID: "GPU-" + node + "-0", Units: units}}}}}
}

// TestUndecidedStartsNoPreemption: filter takes a node whose search its
// request's budget stopped for one where the pod may still fit, so it
// starts no preemption while any node is undecided.
func TestUndecidedStartsNoPreemption(t *testing.T) {
	n := &allocator.Node{Name: "n", Unit: "GiB", Cards: []allocator.Card{{Index: 0, Total: 16, Healthy: true}, {Index: 1, Total: 16, Healthy: true}}}
	twoSlices := gpushare.Demand{{Name: "a", Units: 12, Cards: 1}, {Name: "b", Units: 3, Cards: 1}}
	reason := func(d gpushare.Demand, b *allocator.Budget) string {
		var fe *allocator.FitError
		if err := allocator.FitBudget(n, d, nil, allocator.Binpack{}, &allocator.Placement{}, b); !errors.As(err, &fe) {
			t.Fatalf("FitBudget(%v) = %v, want a FitError", d, err)
		}
		return fe.Reason
	}
	spent := allocator.NewBudget(context.Background(), 0)
	stopped := reason(twoSlices, spent)     // the search ran out
	notExamined := reason(twoSlices, spent) // the next node of the request
	tooBig := reason(gpushare.Demand{{Name: "a", Units: 17, Cards: 1}}, nil)
	for _, tc := range []struct {
		name   string
		failed map[string]string
		want   bool
	}{
		{"every node decided", map[string]string{"n1": tooBig, "n2": tooBig}, false},
		{"a search stopped by the budget", map[string]string{"n1": stopped, "n2": tooBig}, true},
		{"a node not examined", map[string]string{"n1": tooBig, "n2": notExamined}, true},
		{"no node failed", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := undecided(tc.failed); got != tc.want {
				t.Errorf("undecided(%q) = %v, want %v", tc.failed, got, tc.want)
			}
		})
	}
}
