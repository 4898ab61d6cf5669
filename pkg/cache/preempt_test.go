package cache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/pkg/preemption/planner"
	"github.com/gpushare/gpushare/test/util"
)

// fakeVictims answers Victims from the pods a test put in the cache and
// budgets that select pods by their "app" label.
type fakeVictims struct {
	pods map[types.UID]*kubeinfo.PodInfo
	// budgets: budget name -> the app label it covers and what it allows.
	budgets map[string]fakeBudget
}

type fakeBudget struct {
	app     string
	allowed int32
}

func (f *fakeVictims) Victim(_, _ string, uid types.UID) (planner.Victim, bool) {
	p, ok := f.pods[uid]
	if !ok {
		return planner.Victim{}, false
	}
	v := planner.Victim{Priority: p.Priority, StartTime: p.StartTime, Terminating: p.Terminating, GraceSeconds: p.GraceSeconds}
	for name, b := range f.budgets {
		if p.Labels.Get("app") == b.app {
			v.Budgets = append(v.Budgets, name)
		}
	}
	return v, true
}

func (f *fakeVictims) Allowed(budget string) int32 { return f.budgets[budget].allowed }

// low returns a pod of priority prio bound to node holding units on card
// index, started at minute started.
func low(name, node string, index int, units int64, prio int32, started int) *corev1.Pod {
	p := boundOn(name, node, index, units)
	p.Spec.Priority = &prio
	return (&util.PodWrapper{Pod: *p}).Started(time.Unix(int64(started)*60, 0)).Obj()
}

// preemptCluster is a cache of the nodes given and the pods bound on them,
// and the fakeVictims that describes those pods.
func preemptCluster(t *testing.T, clk *clocktesting.FakeClock, nodes []*corev1.Node, pods []*corev1.Pod) (*Cache, *fakeVictims) {
	t.Helper()
	c := newCache(t, clk)
	vs := &fakeVictims{pods: map[types.UID]*kubeinfo.PodInfo{}, budgets: map[string]fakeBudget{}}
	for _, n := range nodes {
		if err := c.SetNode(n); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		info := kubeinfo.NewPodInfo(p)
		c.UpsertPodInfo(info)
		vs.pods[info.UID] = info
	}
	return c, vs
}

// planSummary is what a test compares of a Plan.
type planSummary struct {
	Node    string
	Victims []string
	Units   map[int]int64
}

func summary(p *planner.Plan) *planSummary {
	if p == nil {
		return nil
	}
	s := &planSummary{Node: p.Node, Units: p.Units}
	for _, v := range p.Victims {
		s.Victims = append(s.Victims, v.Name)
	}
	return s
}

func TestPlanPreemption(t *testing.T) {
	two16 := func(name string) *corev1.Node { return util.MakeNode(name).Cards("T4", 16, 16).Obj() }
	high := func(units int64) *corev1.Pod { return util.MakePod("high").GPUMem(units).Priority(1000).Obj() }
	tests := []struct {
		name    string
		nodes   []*corev1.Node
		pods    []*corev1.Pod
		budgets map[string]fakeBudget
		pod     *corev1.Pod
		want    *planSummary
	}{{
		// Issue 25: 7 GiB free on each card, 14 in total; one card's pod goes.
		name:  "two cards of 9 GiB, a 14 GiB pod evicts one card's",
		nodes: []*corev1.Node{two16("n1")},
		pods:  []*corev1.Pod{low("a", "n1", 0, 9, 0, 1), low("b", "n1", 1, 9, 0, 2)},
		pod:   high(14),
		// b started later: of two equal victims the younger goes.
		want: &planSummary{Node: "n1", Victims: []string{"b"}, Units: map[int]int64{1: 14}},
	}, {
		name:  "17 GiB fits no 16 GiB card: no plan",
		nodes: []*corev1.Node{two16("n1"), two16("n2")},
		pods:  []*corev1.Pod{low("a", "n1", 0, 9, 0, 1), low("b", "n1", 1, 9, 0, 2), low("c", "n2", 0, 9, 0, 3)},
		pod:   high(17),
	}, {
		name:  "pods of equal priority are not evicted",
		nodes: []*corev1.Node{two16("n1")},
		pods:  []*corev1.Pod{low("a", "n1", 0, 9, 1000, 1), low("b", "n1", 1, 9, 1000, 2)},
		pod:   high(14),
	}, {
		name:  "the lowest priority goes",
		nodes: []*corev1.Node{two16("n1"), two16("n2")},
		pods:  []*corev1.Pod{low("a", "n1", 0, 9, 10, 1), low("a2", "n1", 1, 9, 10, 1), low("b", "n2", 0, 9, 5, 1), low("b2", "n2", 1, 9, 20, 1)},
		pod:   high(14),
		want:  &planSummary{Node: "n2", Victims: []string{"b"}, Units: map[int]int64{0: 14}},
	}, {
		// Card 0: three 4 GiB pods (two must go); card 1: one 12 GiB pod.
		name:  "the fewest go",
		nodes: []*corev1.Node{two16("n1")},
		pods:  []*corev1.Pod{low("a", "n1", 0, 4, 0, 1), low("b", "n1", 0, 4, 0, 2), low("c", "n1", 0, 4, 0, 3), low("d", "n1", 1, 12, 0, 4)},
		pod:   high(10),
		want:  &planSummary{Node: "n1", Victims: []string{"d"}, Units: map[int]int64{1: 10}},
	}, {
		name:  "only the pods a card needs go: the more important one stays",
		nodes: []*corev1.Node{util.MakeNode("n1").Cards("T4", 16).Obj()},
		pods:  []*corev1.Pod{low("a", "n1", 0, 4, 5, 1), low("b", "n1", 0, 4, 1, 2), low("c", "n1", 0, 8, 0, 3)},
		pod:   high(8),
		want:  &planSummary{Node: "n1", Victims: []string{"c"}, Units: map[int]int64{0: 8}},
	}, {
		name:    "a budget that allows no disruption protects its pod",
		nodes:   []*corev1.Node{two16("n1")},
		pods:    []*corev1.Pod{withApp(low("a", "n1", 0, 9, 0, 2), "db"), low("b", "n1", 1, 9, 0, 1)},
		budgets: map[string]fakeBudget{"default/db": {app: "db", allowed: 0}},
		pod:     high(14),
		want:    &planSummary{Node: "n1", Victims: []string{"b"}, Units: map[int]int64{1: 14}},
	}, {
		name:    "every candidate protected: no plan",
		nodes:   []*corev1.Node{two16("n1")},
		pods:    []*corev1.Pod{withApp(low("a", "n1", 0, 9, 0, 2), "db"), withApp(low("b", "n1", 1, 9, 0, 1), "db")},
		budgets: map[string]fakeBudget{"default/db": {app: "db", allowed: 0}},
		pod:     high(14),
	}, {
		name:    "a budget allowing one disruption cannot lose two on one card",
		nodes:   []*corev1.Node{util.MakeNode("n1").Cards("T4", 16).Obj()},
		pods:    []*corev1.Pod{withApp(low("a", "n1", 0, 8, 0, 1), "db"), withApp(low("b", "n1", 0, 8, 0, 2), "db")},
		budgets: map[string]fakeBudget{"default/db": {app: "db", allowed: 1}},
		pod:     high(16),
	}, {
		name:  "a terminating pod frees its room without an eviction",
		nodes: []*corev1.Node{two16("n1")},
		pods:  []*corev1.Pod{terminating(low("a", "n1", 0, 9, 0, 1)), low("b", "n1", 1, 9, 0, 2)},
		pod:   high(14),
		want:  &planSummary{Node: "n1", Units: map[int]int64{0: 14}},
	}, {
		name:  "fits as it is: nothing to plan",
		nodes: []*corev1.Node{two16("n1")},
		pods:  []*corev1.Pod{low("a", "n1", 0, 9, 0, 1)},
		pod:   high(14),
	}, {
		name:  "a pod over two cards evicts on both",
		nodes: []*corev1.Node{two16("n1")},
		pods:  []*corev1.Pod{low("a", "n1", 0, 9, 0, 1), low("b", "n1", 1, 9, 0, 2)},
		pod:   util.MakePod("high").GPUMemCards(20, 2).Priority(1000).Obj(),
		want:  &planSummary{Node: "n1", Victims: []string{"a", "b"}, Units: map[int]int64{0: 10, 1: 10}},
	}, {
		name:  "CPU the victims would not free: no plan",
		nodes: []*corev1.Node{util.MakeNode("n1").Cards("T4", 16).Host("4", "32Gi").Obj()},
		pods: []*corev1.Pod{low("a", "n1", 0, 9, 0, 1),
			util.MakePod("cpu").Container("x").Requests("3", "1Gi").Node("n1").Priority(2000).Obj()},
		pod: util.MakePod("high").GPUMem(14).Requests("2", "1Gi").Priority(1000).Obj(),
	}, {
		name:  "a pod the preemptor may not use the card of stays",
		nodes: []*corev1.Node{util.MakeNode("n1").Cards("T4", 16).Obj(), util.MakeNode("n2").Cards("A100", 16).Obj()},
		pods:  []*corev1.Pod{low("a", "n1", 0, 9, 0, 1), low("b", "n2", 0, 9, 0, 2)},
		pod:   util.MakePod("high").GPUMem(14).Priority(1000).GPUModels("A100").Obj(),
		want:  &planSummary{Node: "n2", Victims: []string{"b"}, Units: map[int]int64{0: 14}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, vs := preemptCluster(t, clocktesting.NewFakeClock(time.Unix(1000, 0)), tc.nodes, tc.pods)
			vs.budgets = tc.budgets
			var names []string
			for _, n := range tc.nodes {
				names = append(names, n.Name)
			}
			plan, err := c.PlanPreemption(context.Background(), kubeinfo.NewPodInfo(tc.pod), names, vs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, summary(plan)); diff != "" {
				t.Errorf("plan (-want +got):\n%s", diff)
			}
		})
	}
}

func withApp(p *corev1.Pod, app string) *corev1.Pod {
	return (&util.PodWrapper{Pod: *p}).Label("app", app).Obj()
}

func terminating(p *corev1.Pod) *corev1.Pod {
	return (&util.PodWrapper{Pod: *p}).Terminating().Obj()
}

// TestReservationLifecycle follows the room a preemption reserves: held
// against every other pod, free to its own (once the victim has gone),
// taken by the pod's bind, and released by Release, the pod's delete, or
// its deadline.
func TestReservationLifecycle(t *testing.T) {
	ctx := context.Background()
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	setup := func(t *testing.T) (*Cache, *kubeinfo.PodInfo, *planner.Plan) {
		t.Helper()
		c, vs := preemptCluster(t, clk, []*corev1.Node{util.MakeNode("n1").Cards("T4", 16, 16).Obj(), util.MakeNode("n2").Cards("T4", 16).Obj()},
			[]*corev1.Pod{low("a", "n1", 0, 9, 0, 1), low("b", "n1", 1, 9, 0, 2), low("c", "n2", 0, 12, 0, 3)})
		high := kubeinfo.NewPodInfo(util.MakePod("high").GPUMem(14).Requests("1", "1Gi").Priority(1000).Obj())
		plan, err := c.PlanPreemption(ctx, high, []string{"n1"}, vs)
		if err != nil || plan == nil {
			t.Fatalf("plan = %v, %v", plan, err)
		}
		if err := c.Reserve(plan, time.Minute); err != nil {
			t.Fatal(err)
		}
		return c, high, plan
	}
	other := kubeinfo.NewPodInfo(util.MakePod("other").GPUMem(2).Obj())
	// fits is Filter's answer for p on n1; FilterBest's (scoreNodes, which
	// fits several chunks of nodes at once) must agree.
	fits := func(t *testing.T, c *Cache, p *kubeinfo.PodInfo) []string {
		t.Helper()
		fit, _, err := c.Filter(ctx, p, []string{"n1"})
		if err != nil {
			t.Fatal(err)
		}
		best, _, err := c.FilterBest(ctx, p, []string{"n1"})
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(fit, best, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("FilterBest disagrees with Filter for pod %s (-Filter +FilterBest):\n%s", p.Name, diff)
		}
		return fit
	}

	t.Run("held for the pod alone", func(t *testing.T) {
		c, high, plan := setup(t)
		if node, ok := c.Reserved(high.UID); !ok || node != "n1" {
			t.Errorf("Reserved = %q, %v", node, ok)
		}
		// Card 1 holds b (9) and the room (14): nothing fits there, and
		// card 0 has 7 free, so a 2 GiB pod still fits on n1.
		if diff := cmp.Diff([]int64{9, 23}, used(t, c, "n1")); diff != "" {
			t.Errorf("cards (-want +got):\n%s", diff)
		}
		if got := fits(t, c, high); len(got) != 0 {
			t.Errorf("the pod fits before its victim has gone: %v", got)
		}
		if err := c.Reserve(plan, time.Minute); !errors.Is(err, ErrPodPlaced) {
			t.Errorf("second Reserve = %v, want ErrPodPlaced", err)
		}
		c.DeletePod("uid-b") // the victim has gone
		if got := fits(t, c, high); len(got) != 1 {
			t.Errorf("the pod does not fit in its own room")
		}
		big := kubeinfo.NewPodInfo(util.MakePod("big").GPUMem(10).Priority(2000).Obj())
		if got := fits(t, c, big); len(got) != 0 {
			t.Errorf("another pod fits in the reserved room: %v", got)
		}
		// The pod's own update (its nomination) keeps the room and its CPU.
		c.UpsertPodInfo(high)
		if diff := cmp.Diff([2]int64{1000, 1024}, hostUsed(t, c, "n1")); diff != "" {
			t.Errorf("CPU and memory held (-want +got):\n%s", diff)
		}
		a, err := c.Assume(ctx, high, "n1")
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(map[int]int64{1: 14}, a.PerCard()); diff != "" {
			t.Errorf("allocation (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]int64{9, 14}, used(t, c, "n1")); diff != "" {
			t.Errorf("cards after the bind (-want +got):\n%s", diff)
		}
		if _, ok := c.Reserved(high.UID); ok {
			t.Error("the room is still reserved after the bind")
		}
		if got := fits(t, c, other); len(got) != 1 {
			t.Error("a small pod no longer fits on card 0")
		}
	})

	t.Run("a bind elsewhere releases it", func(t *testing.T) {
		c, high, _ := setup(t)
		c.DeletePod("uid-c")
		if _, err := c.Assume(ctx, high, "n2"); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]int64{9, 9}, used(t, c, "n1")); diff != "" {
			t.Errorf("n1's cards (-want +got):\n%s", diff)
		}
	})

	t.Run("Release and delete release it", func(t *testing.T) {
		c, high, _ := setup(t)
		c.Release(high.UID)
		if diff := cmp.Diff([]int64{9, 9}, used(t, c, "n1")); diff != "" {
			t.Errorf("after Release (-want +got):\n%s", diff)
		}
		c2, high2, _ := setup(t)
		c2.DeletePod(high2.UID)
		if diff := cmp.Diff([]int64{9, 9}, used(t, c2, "n1")); diff != "" {
			t.Errorf("after the pod's delete (-want +got):\n%s", diff)
		}
		if _, ok := c2.Reserved(high2.UID); ok {
			t.Error("still reserved")
		}
	})

	t.Run("the deadline releases it", func(t *testing.T) {
		c, high, _ := setup(t)
		clk.Step(time.Minute) // the ttl; the victim's 30 s grace is still running
		if got := c.Expire(); len(got) != 0 {
			t.Errorf("expired early: %+v", got)
		}
		c.DeletePod("uid-b") // the victim has gone; the pod was not bound in time
		clk.Step(31 * time.Second)
		want := []Expired{{Namespace: "default", Name: "high", Node: "n1", Reserved: true}}
		if diff := cmp.Diff(want, c.Expire()); diff != "" {
			t.Errorf("Expire (-want +got):\n%s", diff)
		}
		if _, ok := c.Reserved(high.UID); ok {
			t.Error("still reserved")
		}
	})

	// Review S2: a victim may take longer than the grace period known
	// (kube-scheduler's own victims have one the extender does not know).
	t.Run("it waits for a victim still on its node, up to MaxVictimWait", func(t *testing.T) {
		c, high, _ := setup(t)
		clk.Step(time.Minute + 31*time.Second) // past the deadline; b is still there
		if got := c.Expire(); len(got) != 0 {
			t.Errorf("expired while its victim is still there: %+v", got)
		}
		clk.Step(MaxVictimWait)
		if got := c.Expire(); len(got) != 1 {
			t.Errorf("Expire past MaxVictimWait = %+v, want the room released", got)
		}
		if _, ok := c.Reserved(high.UID); ok {
			t.Error("still reserved")
		}
	})

	t.Run("kube-scheduler's victims are awaited too", func(t *testing.T) {
		c, _ := preemptCluster(t, clk, []*corev1.Node{util.MakeNode("n1").Cards("T4", 16).Obj()}, []*corev1.Pod{low("a", "n1", 0, 4, 0, 1)})
		cpu := util.MakePod("cpu").Node("n1").Requests("1", "1Gi").Obj() // kube-scheduler evicts it for its CPU
		c.UpsertPod(cpu)
		high := kubeinfo.NewPodInfo(util.MakePod("high").GPUMem(8).Priority(1000).Obj())
		hold := c.HoldNow(ctx, high, "n1")
		if hold == nil {
			t.Fatal("HoldNow = nil; the cards fit")
		}
		hold.Awaited = []types.UID{cpu.UID}
		if err := c.Reserve(hold, time.Minute); err != nil {
			t.Fatal(err)
		}
		clk.Step(2 * time.Minute)
		if got := c.Expire(); len(got) != 0 {
			t.Errorf("expired while kube-scheduler's victim is still there: %+v", got)
		}
		c.DeletePod(cpu.UID)
		clk.Step(DefaultAssumeTTL + time.Second) // past the deadline the wait moved on
		if got := c.Expire(); len(got) != 1 {
			t.Errorf("Expire once the victim has gone = %+v, want the room released", got)
		}
	})

	t.Run("a stale plan is refused", func(t *testing.T) {
		c, vs := preemptCluster(t, clk, []*corev1.Node{util.MakeNode("n1").Cards("T4", 16, 16).Obj()},
			[]*corev1.Pod{low("a", "n1", 0, 9, 0, 1), low("b", "n1", 1, 9, 0, 2)})
		high := kubeinfo.NewPodInfo(util.MakePod("high").GPUMem(14).Priority(1000).Obj())
		plan, err := c.PlanPreemption(ctx, high, []string{"n1"}, vs)
		if err != nil || plan == nil {
			t.Fatalf("plan = %v, %v", plan, err)
		}
		c.UpsertPod(low("d", "n1", 0, 2, 0, 3))
		if err := c.Reserve(plan, time.Minute); !errors.Is(err, ErrPlanStale) {
			t.Errorf("Reserve = %v, want ErrPlanStale", err)
		}
	})

	t.Run("victims of a reservation are not evicted twice", func(t *testing.T) {
		c, _, _ := setup(t)
		vs := &fakeVictims{pods: map[types.UID]*kubeinfo.PodInfo{}}
		for _, p := range []*corev1.Pod{low("a", "n1", 0, 9, 0, 1), low("b", "n1", 1, 9, 0, 2)} {
			vs.pods[p.UID] = kubeinfo.NewPodInfo(p)
		}
		// A second pod of the same size: b's room is the first one's, so
		// only a can go for it.
		second := kubeinfo.NewPodInfo(util.MakePod("second").UID("uid-second").GPUMem(14).Priority(1000).Obj())
		plan, err := c.PlanPreemption(ctx, second, []string{"n1"}, vs)
		if err != nil {
			t.Fatal(err)
		}
		want := &planSummary{Node: "n1", Victims: []string{"a"}, Units: map[int]int64{0: 14}}
		if diff := cmp.Diff(want, summary(plan)); diff != "" {
			t.Errorf("second plan (-want +got):\n%s", diff)
		}
	})
}

func TestHoldNow(t *testing.T) {
	c, _ := preemptCluster(t, clocktesting.NewFakeClock(time.Unix(1000, 0)), []*corev1.Node{util.MakeNode("n1").Cards("T4", 16).Obj()},
		[]*corev1.Pod{low("a", "n1", 0, 9, 0, 1)})
	pod := kubeinfo.NewPodInfo(util.MakePod("high").GPUMem(6).Priority(1000).Obj())
	plan := c.HoldNow(context.Background(), pod, "n1")
	if diff := cmp.Diff(&planSummary{Node: "n1", Units: map[int]int64{0: 6}}, summary(plan)); diff != "" {
		t.Fatalf("HoldNow (-want +got):\n%s", diff)
	}
	if err := c.Reserve(plan, time.Minute); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{15}, used(t, c, "n1")); diff != "" {
		t.Errorf("cards (-want +got):\n%s", diff)
	}
	if c.HoldNow(context.Background(), kubeinfo.NewPodInfo(util.MakePod("big").GPUMem(8).Obj()), "n1") != nil {
		t.Error("HoldNow of a pod that does not fit")
	}
}

// cancellingVictims is fakeVictims that ends a context the first time it
// is asked about a pod.
type cancellingVictims struct {
	*fakeVictims
	cancel context.CancelFunc
}

func (c cancellingVictims) Victim(ns, name string, uid types.UID) (planner.Victim, bool) {
	c.cancel()
	return c.fakeVictims.Victim(ns, name, uid)
}

// TestPlanPreemptionStopsAtItsContext (review D2): a plan looks at its
// context before every node, not every 256th.
func TestPlanPreemptionStopsAtItsContext(t *testing.T) {
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	var names []string
	for i := range 5 {
		name := fmt.Sprintf("n%d", i)
		names = append(names, name)
		nodes = append(nodes, util.MakeNode(name).Cards("T4", 16).Obj())
		pods = append(pods, low("low-"+name, name, 0, 9, 0, i))
	}
	c, vs := preemptCluster(t, clocktesting.NewFakeClock(time.Unix(0, 0)), nodes, pods)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// 17 GiB fits no card: without its context ending the plan would look
	// at every node and find nothing.
	_, err := c.PlanPreemption(ctx, kubeinfo.NewPodInfo(util.MakePod("high").GPUMem(17).Priority(1000).Obj()), names, cancellingVictims{vs, cancel})
	if err == nil || !strings.Contains(err.Error(), "stopped after 1 of 5 nodes") {
		t.Errorf("PlanPreemption with its context ended on the first node = %v, want it stopped after 1 of 5 nodes", err)
	}
}

// TestLowestPriority: the lowest priority among the pods holding card
// memory, reservations aside, as pods come and go.
func TestLowestPriority(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	c := newCache(t, clk)
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16, 16).Obj()); err != nil {
		t.Fatal(err)
	}
	check := func(step string, want int32, wantOK bool) {
		t.Helper()
		if got, ok := c.LowestPriority(); got != want && wantOK || ok != wantOK {
			t.Errorf("%s: LowestPriority = %d, %v; want %d, %v", step, got, ok, want, wantOK)
		}
	}
	check("empty", 0, false)
	a, b := kubeinfo.NewPodInfo(low("a", "n1", 0, 4, 10, 1)), kubeinfo.NewPodInfo(low("b", "n1", 1, 4, 5, 1))
	c.UpsertPodInfo(a)
	c.UpsertPodInfo(b)
	check("two bound pods", 5, true)
	high := kubeinfo.NewPodInfo(util.MakePod("high").GPUMem(8).Priority(1000).Obj())
	if err := c.Reserve(&planner.Plan{Namespace: "default", Name: "high", UID: high.UID, Node: "n1", Units: map[int]int64{0: 8}, Gen: c.nodes["n1"].gen}, time.Minute); err != nil {
		t.Fatal(err)
	}
	check("a reservation of priority 1000 counts for nothing", 5, true)
	c.DeletePod(b.UID)
	check("the lowest gone", 10, true)
	assumed := kubeinfo.NewPodInfo(util.MakePod("mid").GPUMem(2).Priority(7).Obj())
	if _, err := c.Assume(context.Background(), assumed, "n1"); err != nil {
		t.Fatal(err)
	}
	check("an assumed pod counts", 7, true)
	c.Forget(assumed.UID)
	c.DeletePod(a.UID)
	check("only the reservation left", 0, false)
}

// TestFitsOutside: a node not sent counts only where the pod's cards fit,
// its CPU and memory too (where the node reports them), and usable takes it.
func TestFitsOutside(t *testing.T) {
	nodes := []*corev1.Node{
		util.MakeNode("sent").Cards("T4", 16).Obj(),
		util.MakeNode("full").Cards("T4", 16).Obj(),
		util.MakeNode("cpu").Cards("T4", 16).Host("1", "8Gi").Obj(),
		util.MakeNode("free").Cards("T4", 16).Host("8", "32Gi").Obj(),
	}
	c, _ := preemptCluster(t, clocktesting.NewFakeClock(time.Unix(0, 0)), nodes, []*corev1.Pod{low("a", "full", 0, 9, 0, 1)})
	pod := kubeinfo.NewPodInfo(util.MakePod("p").GPUMem(14).Requests("2", "1Gi").Obj())
	tests := []struct {
		name   string
		usable func(string) bool
		want   string
	}{
		{"every node usable: the free one", nil, "free"},
		{"the free one not usable: none (full lacks cards, cpu its CPU)", func(n string) bool { return n != "free" }, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := c.FitsOutside(context.Background(), pod, []string{"sent"}, tc.usable)
			if got != tc.want {
				t.Errorf("FitsOutside = %q, want %q", got, tc.want)
			}
		})
	}
}
