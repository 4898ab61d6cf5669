package extender

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/test/util"
)

// TestPreemptionPastNodesNotSent (review D4): in a cluster of more than 100
// nodes kube-scheduler sends only the first nodes that pass its filters, so
// filter evicts nobody while the pod fits a node it did not send; but a
// node the pod cannot use (cordoned, tainted, of other labels, out of CPU)
// is no such node, and when kube-scheduler sent fewer nodes than it looks
// for, it sent every one that passed.
func TestPreemptionPastNodesNotSent(t *testing.T) {
	// The scenario's nodes and pod carry a label of their own: the
	// fixture's other nodes are no place for the pod.
	const scenario = "gpushare.io/test-scenario"
	high := func() *util.PodWrapper {
		return util.MakePod("high").GPUMem(14).Priority(1000).Requests("1", "1Gi").NodeSelector(scenario, "outside")
	}
	free := func() *util.NodeWrapper {
		return util.MakeNode("free").Cards("Tesla-T4", 16).Host("8", "32Gi").Label(scenario, "outside")
	}
	tests := []struct {
		name    string
		free    *corev1.Node
		pod     *corev1.Pod
		sent    int // of the 110 full nodes
		preempt bool
	}{
		{"a free node not sent: nobody evicted", free().Obj(), high().Obj(), 100, false},
		{"the free node is cordoned", free().Unschedulable().Obj(), high().Obj(), 100, true},
		{"the free node is cordoned, the pod tolerates it", free().Unschedulable().Obj(),
			high().Tolerate(corev1.TaintNodeUnschedulable, "", corev1.TaintEffectNoSchedule).Obj(), 100, false},
		{"the free node has a NoSchedule taint", free().Taint("dedicated", "infer", corev1.TaintEffectNoSchedule).Obj(), high().Obj(), 100, true},
		{"the free node has a NoExecute taint", free().Taint("dedicated", "infer", corev1.TaintEffectNoExecute).Obj(), high().Obj(), 100, true},
		{"the free node's taint is tolerated", free().Taint("dedicated", "infer", corev1.TaintEffectNoSchedule).Obj(),
			high().Tolerate("dedicated", "infer", corev1.TaintEffectNoSchedule).Obj(), 100, false},
		{"a PreferNoSchedule taint keeps nobody off", free().Taint("dedicated", "infer", corev1.TaintEffectPreferNoSchedule).Obj(), high().Obj(), 100, false},
		{"the pod's node selector excludes the free node", free().Obj(), high().NodeSelector("pool", "train").Obj(), 100, true},
		{"the pod's node selector matches the free node", free().Label("pool", "train").Obj(), high().NodeSelector("pool", "train").Obj(), 100, false},
		{"the free node's CPU is all requested", free().Host("1", "32Gi").Obj(), high().Requests("2", "1Gi").Obj(), 100, true},
		{"the free node's memory is all requested", free().Host("8", "1Gi").Obj(), high().Requests("1", "2Gi").Obj(), 100, true},
		{"fewer nodes sent than kube-scheduler looks for: every feasible one", free().Obj(), high().Obj(), 90, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, names := fullNodes("full", 110, 0)
			for _, o := range objs {
				if n, ok := o.(*corev1.Node); ok {
					n.Labels = map[string]string{scenario: "outside"}
				}
			}
			f, api := preemptFixture(t, append(objs, tc.free)...)
			filter(t, f, tc.pod, names[:tc.sent]...)
			if !tc.preempt {
				time.Sleep(100 * time.Millisecond)
				if _, ok := f.cache.Reserved(tc.pod.UID); ok {
					t.Error("room reserved though the pod fits the free node")
				}
				if got := api.recorded(); len(got) != 0 {
					t.Errorf("API writes: %v", got)
				}
				return
			}
			eventuallyCalls(t, api, []string{"nominate high to full-00", "evict full-00-low"})
		})
	}
}

// TestPreemptVerbWithKubeSchedulersVictims (review S4): where a candidate
// of kube-scheduler's needs both its victims that hold no GPU memory (for
// CPU here) and the room of a card, the extender evicts the card's pods
// itself and leaves kube-scheduler its other victims there, rather than
// evicting GPU pods in their place or answering no node.
func TestPreemptVerbWithKubeSchedulersVictims(t *testing.T) {
	gpu := func(name string, card int, started int64) *corev1.Pod {
		return util.MakePod(name).GPUMem(9).Requests("1", "1Gi").Node("one").Allocation(oneCardOf("one", card, 9)).Started(time.Unix(started, 0)).Obj()
	}
	f, api := preemptFixture(t, util.MakeNode("one").Cards("Tesla-T4", 16, 16).Host("4", "16Gi").Obj(),
		gpu("a", 0, 100), gpu("b", 1, 200), util.MakePod("hog").Requests("2", "1Gi").Node("one").Obj())
	// By node totals 14 GiB fit; the CPU does not: kube-scheduler's victim
	// is hog. No card has 14 GiB free: one GPU pod must go too.
	high := util.MakePod("high").GPUMem(14).Requests("2", "1Gi").Priority(1000).Obj()
	got := preemptVerb(t, f, high, map[string][]string{"one": {"uid-hog"}})
	if diff := cmp.Diff(map[string][]string{"one": {"uid-hog"}}, got); diff != "" {
		t.Errorf("preempt (-want +got):\n%s", diff)
	}
	eventuallyCalls(t, api, []string{"nominate high to one", "evict b"})
}
