package extender

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpushare/gpushare/test/util"
)

// pdb is PodDisruptionBudget name in namespace ns over selector (nil: the
// field unset), processed by the disruption controller with allowed
// disruptions left.
func pdb(ns, name string, selector *metav1.LabelSelector, allowed int32) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: selector},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: allowed},
	}
}

// TestBudgetsAsTheEvictionAPIMatchesThem (review D5): a plan counts a pod as
// covered by exactly the budgets the Eviction API checks: an empty
// selector covers every pod of its namespace, labelled or not; a missing
// one none; a pod two budgets cover is never evicted (the API refuses it);
// a pod not running yet is evicted whatever its budgets say. A plan that
// needs a protected pod evicts nobody.
func TestBudgetsAsTheEvictionAPIMatchesThem(t *testing.T) {
	everything := &metav1.LabelSelector{}
	app := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
	// Two 8 GiB pods share node one's 16 GiB card; the preemptor asks
	// all of it, so both must go.
	pair := func(ns string, a, b *util.PodWrapper) []runtime.Object {
		return []runtime.Object{util.MakeNode("one").Cards("Tesla-T4", 16).Obj(),
			a.GPUMem(8).Node("one").Allocation(oneCard("one", 8)).Namespace(ns).Obj(),
			b.GPUMem(8).Node("one").Allocation(oneCard("one", 8)).Namespace(ns).Obj()}
	}
	evictBoth := []string{"nominate high to one", "evict a", "evict b"}
	tests := []struct {
		name string
		objs []runtime.Object
		want []string
	}{
		{"an empty selector protects the whole namespace", append(pair("team", util.MakePod("a"), util.MakePod("b").Label("app", "db")),
			pdb("team", "all", everything, 0)), nil},
		{"an empty selector protects pods without labels", append(pair("team", util.MakePod("a"), util.MakePod("b")),
			pdb("team", "all", everything, 0)), nil},
		{"one disruption left for two pods an empty selector covers", append(pair("team", util.MakePod("a"), util.MakePod("b")),
			pdb("team", "all", everything, 1)), nil},
		{"two disruptions left for them", append(pair("team", util.MakePod("a"), util.MakePod("b")),
			pdb("team", "all", everything, 2)), evictBoth},
		{"a budget without a selector covers nobody", append(pair("team", util.MakePod("a"), util.MakePod("b")),
			pdb("team", "none", nil, 0)), evictBoth},
		{"an empty selector of another namespace", append(pair("team", util.MakePod("a"), util.MakePod("b")),
			pdb("other", "all", everything, 0)), evictBoth},
		{"two budgets cover a pod: the API refuses to evict it", append(pair("team", util.MakePod("a"), util.MakePod("b").Label("app", "db")),
			pdb("team", "db", app, 5), pdb("team", "all", everything, 5)), nil},
		{"a pod not running yet is evicted whatever its budget", append(pair("team", util.MakePod("a"), util.MakePod("b").Label("app", "db").Phase(corev1.PodPending)),
			pdb("team", "db", app, 0)), []string{"nominate high to one", "evict a", "evict b"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, api := preemptFixture(t, tc.objs...)
			high := util.MakePod("high").GPUMem(16).Priority(1000).Obj()
			filter(t, f, high, "one")
			if tc.want == nil {
				time.Sleep(100 * time.Millisecond)
				if diff := cmp.Diff([]string(nil), api.recorded()); diff != "" {
					t.Errorf("API writes (-want +got):\n%s", diff)
				}
				return
			}
			eventuallyCalls(t, api, tc.want)
		})
	}
}

// TestEmptySelectorWastesNoEviction is the review's probe of D5: of two
// pods on a card, the one in a namespace whose budget has an empty
// selector and no disruption left cannot go, so the other is not evicted
// either.
func TestEmptySelectorWastesNoEviction(t *testing.T) {
	f, api := preemptFixture(t, util.MakeNode("one").Cards("Tesla-T4", 16).Obj(),
		util.MakePod("a").Namespace("batch").GPUMem(8).Node("one").Allocation(oneCard("one", 8)).Priority(100).Obj(),
		util.MakePod("b").Namespace("team").GPUMem(8).Node("one").Allocation(oneCard("one", 8)).Obj(),
		pdb("team", "all", &metav1.LabelSelector{}, 0))
	filter(t, f, util.MakePod("high").GPUMem(16).Priority(1000).Obj(), "one")
	time.Sleep(100 * time.Millisecond)
	if diff := cmp.Diff([]string(nil), api.recorded()); diff != "" {
		t.Errorf("API writes (-want +got):\n%s", diff)
	}
}
