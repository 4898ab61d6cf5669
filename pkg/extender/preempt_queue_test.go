package extender

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	policylisters "k8s.io/client-go/listers/policy/v1"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// spyLister wraps the preemptor's PodDisruptionBudget lister: it counts
// the lists of a namespace's budgets, and holds each until release is
// closed when release is set.
type spyLister struct {
	policylisters.PodDisruptionBudgetLister
	release chan struct{}
	mu      sync.Mutex
	lists   int
}

func (s *spyLister) PodDisruptionBudgets(ns string) policylisters.PodDisruptionBudgetNamespaceLister {
	return &spyNamespaceLister{PodDisruptionBudgetNamespaceLister: s.PodDisruptionBudgetLister.PodDisruptionBudgets(ns), spy: s}
}

func (s *spyLister) listed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists
}

type spyNamespaceLister struct {
	policylisters.PodDisruptionBudgetNamespaceLister
	spy *spyLister
}

func (n *spyNamespaceLister) List(sel labels.Selector) ([]*policyv1.PodDisruptionBudget, error) {
	n.spy.mu.Lock()
	n.spy.lists++
	n.spy.mu.Unlock()
	if n.spy.release != nil {
		<-n.spy.release
	}
	return n.PodDisruptionBudgetNamespaceLister.List(sel)
}

// spyOn replaces f's preemptor with one writing to the same API whose
// budget lister is a spy.
func spyOn(tb testing.TB, f *fixture, release chan struct{}) *spyLister {
	tb.Helper()
	s := &spyLister{release: release}
	startPreemptorWith(tb, f, f.preemptAPI, func(l policylisters.PodDisruptionBudgetLister) policylisters.PodDisruptionBudgetLister {
		s.PodDisruptionBudgetLister = l
		return s
	})
	return s
}

// fullNodes returns n nodes of one 16 GiB card, each holding a labelled
// 9 GiB pod of priority prio, named prefix-NN and prefix-NN-low.
func fullNodes(prefix string, n int, prio int32) (objs []runtime.Object, names []string) {
	for i := range n {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		names = append(names, name)
		objs = append(objs, util.MakeNode(name).Cards("Tesla-T4", 16).Obj(),
			util.MakePod(name+"-low").GPUMem(9).Node(name).Allocation(oneCard(name, 9)).Priority(prio).Label("app", "batch").Obj())
	}
	return objs, names
}

// filter sends a filter of pod over nodes and returns the nodes that fit.
func filter(t *testing.T, f *fixture, pod *corev1.Pod, nodes ...string) []string {
	t.Helper()
	code, body := f.do(t, "POST", Prefix+"/filter", extenderArgs(t, pod, nodes...))
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal([]byte(body), &res); code != http.StatusOK || err != nil || res.Error != "" {
		t.Fatalf("filter = %d %s", code, body)
	}
	return *res.NodeNames
}

// TestFilterAnswersBeforeThePlan (review D2): a pod that fits nowhere is
// answered at once; its preemption is planned after the answer, outside
// kube-scheduler's scheduling cycle.
func TestFilterAnswersBeforeThePlan(t *testing.T) {
	objs, names := fullNodes("full", 3, 0)
	f, api := preemptFixture(t, objs...)
	release := make(chan struct{})
	spy := spyOn(t, f, release)
	high := util.MakePod("high").GPUMem(14).Priority(1000).Obj()
	body := extenderArgs(t, high, names...)
	answered := make(chan string, 1)
	go func() {
		_, out := f.do(t, "POST", Prefix+"/filter", body)
		answered <- out
	}()
	select {
	case out := <-answered:
		var res extenderv1.ExtenderFilterResult
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.NodeNames == nil || len(*res.NodeNames) != 0 {
			t.Errorf("filter = %s; want no node", out)
		}
	case <-time.After(10 * time.Second):
		t.Error("filter waited for the preemption's plan")
	}
	close(release)
	eventuallyCalls(t, api, []string{"nominate high to full-00", "evict full-00-low"})
	if spy.listed() == 0 {
		t.Error("the plan read no budgets")
	}
}

// TestNoPlanForAPodThatCannotPreempt (review D2): a pod that can evict
// nobody (no GPU pod of a lower priority, or preemptionPolicy Never) reads
// no budget, and neither does a plan for the pods it cannot evict.
func TestNoPlanForAPodThatCannotPreempt(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
	}{
		{"priority 0, every GPU pod of priority 0", util.MakePod("zero").GPUMem(14).Obj()},
		{"priority 5, no pod on the nodes sent below it", util.MakePod("five").GPUMem(14).Priority(5).Obj()},
		{"preemptionPolicy Never", util.MakePod("never").GPUMem(14).Priority(1000).PreemptNever().Obj()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, names := fullNodes("full", 3, 5)
			f, api := preemptFixture(t, objs...)
			spy := spyOn(t, f, nil)
			filter(t, f, tc.pod, names...)
			time.Sleep(50 * time.Millisecond)
			if n := spy.listed(); n != 0 {
				t.Errorf("budgets listed %d times", n)
			}
			if got := api.recorded(); len(got) != 0 {
				t.Errorf("API writes: %v", got)
			}
		})
	}
}

// TestBudgetsListedOncePerPlan (review D2): a plan lists and converts a
// namespace's budgets once, not once per pod it looks at.
func TestBudgetsListedOncePerPlan(t *testing.T) {
	objs, names := fullNodes("full", 6, 0)
	f, api := preemptFixture(t, objs...)
	spy := spyOn(t, f, nil)
	// 17 GiB fits no card: the plan looks at every pod and finds nothing.
	filter(t, f, util.MakePod("huge").GPUMem(17).Priority(1000).Obj(), names...)
	time.Sleep(100 * time.Millisecond)
	if n := spy.listed(); n > 1 {
		t.Errorf("one namespace's budgets listed %d times by one plan, want once", n)
	}
	if got := api.recorded(); len(got) != 0 {
		t.Errorf("API writes: %v", got)
	}
}

// oneCardOf is an allocation of units on card index of node.
func oneCardOf(node string, index int, units int64) *gpushare.Allocation {
	return &gpushare.Allocation{Node: node, Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: index, UUID: fmt.Sprintf("GPU-%s-%d", node, index), Units: units}}}}}
}

// TestNoPlanAgainWhileNothingChanged: a pod whose plan found nothing is not
// planned again until a node, a pod or a budget changes.
func TestNoPlanAgainWhileNothingChanged(t *testing.T) {
	objs, names := fullNodes("full", 3, 0)
	f, api := preemptFixture(t, objs...)
	spy := spyOn(t, f, nil)
	huge := util.MakePod("huge").GPUMem(17).Priority(1000).Obj() // fits no card
	settled := func(want int) {
		t.Helper()
		_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return spy.listed() >= want, nil
		})
		time.Sleep(50 * time.Millisecond)
		if got := spy.listed(); got != want {
			t.Errorf("plans (budget lists) = %d, want %d", got, want)
		}
	}
	filter(t, f, huge, names...)
	settled(1)
	for range 3 {
		filter(t, f, huge, names...)
	}
	settled(1)
	if _, err := f.client.PolicyV1().PodDisruptionBudgets("default").Create(context.Background(), pdb("default", "new", nil, 0), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	_ = wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		b, err := spy.PodDisruptionBudgets("default").Get("new")
		return err == nil && b != nil, nil
	})
	filter(t, f, huge, names...)
	settled(2)
	if got := api.recorded(); len(got) != 0 {
		t.Errorf("API writes: %v", got)
	}
}
