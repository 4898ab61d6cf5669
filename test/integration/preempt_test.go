package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// Priority classes of the preemption test.
const (
	classLow  = "gpushare-test-low"  // 10
	classHigh = "gpushare-test-high" // 1000
	classTop  = "gpushare-test-top"  // 2000, preemptionPolicy Never
)

// scenarioLabel keeps each scenario's pods on its own nodes.
const scenarioLabel = "gpushare.io/test-scenario"

// afterVictimsBound bounds the wait for a preemptor once its victims are
// gone (liveness, not speed). kube-scheduler usually retries the pod on the
// victim's deletion, but in a cold make test (the machine saturated) it
// retried two-high only 30.2 s after its last attempt, though the victim
// was deleted right after that attempt: 30 s is the period of its
// unschedulable-queue flush, to which its backoff (up to 10 s) may add.
const afterVictimsBound = 60 * time.Second

// TestPreemptionThroughRealScheduler drives pods of PriorityClasses
// through kube-scheduler (config/kube-scheduler-config.yaml, preemptVerb
// included) and the extender. Each scenario has its own nodes, which its
// pods select by label. Nothing runs the pods: the test plays the kubelet
// and ends a victim's graceful termination itself (finishTerminating).
func TestPreemptionThroughRealScheduler(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	never := corev1.PreemptNever
	for name, value := range map[string]int32{classLow: 10, classHigh: 1000, classTop: 2000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if name == classTop {
			pc.PreemptionPolicy = &never
		}
		if _, err := c.admin.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	nodes := 0
	addNodes := func(scenario string, names ...string) {
		for _, n := range names {
			c.addNode(t, util.MakeNode(n).Cards("Tesla-T4", 16, 16).Label(scenarioLabel, scenario).Obj())
		}
		nodes += len(names)
		waitExtenderNodes(t, c, nodes)
	}
	pod := func(scenario, name, class string, units int64) *util.PodWrapper {
		return util.MakePod(name).GPUMem(units).PriorityClass(class).NodeSelector(scenarioLabel, scenario)
	}
	// place creates low-priority pods one after the other, each bound
	// before the next: 9 GiB pods then take one card each.
	place := func(pods ...*corev1.Pod) {
		for _, p := range pods {
			c.createPod(t, p)
			c.waitBound(t, []string{p.Name}, 30*time.Second)
		}
	}

	t.Run("two cards of 7 GiB free: one card's pod goes", func(t *testing.T) {
		// Issue 25: 14 GiB free on the node, 7 on each card. kube-scheduler's
		// own dry run finds the pod fits the node's total without a victim.
		addNodes("two", "two-1")
		place(pod("two", "two-a", classLow, 9).Obj(), pod("two", "two-b", classLow, 9).Obj())
		c.createPod(t, pod("two", "two-high", classHigh, 14).Obj())
		victims := c.waitTerminating(t, 1, "two-a", "two-b")
		nominated := c.waitNominated(t, "two-high")
		if nominated != "two-1" {
			t.Errorf("two-high nominated to %q, want two-1", nominated)
		}
		victimCard := cardOf(t, c, victims[0])
		c.finishTerminating(t, victims...)
		c.waitBound(t, []string{"two-high"}, afterVictimsBound)
		if got := cardOf(t, c, "two-high"); got != victimCard {
			t.Errorf("two-high landed on card %d; its victim %s held card %d", got, victims[0], victimCard)
		}
		c.expectUntouched(t, except([]string{"two-a", "two-b"}, victims)...)
		c.checkNoOvercommit(t)
	})

	t.Run("17 GiB fits no 16 GiB card: nobody evicted", func(t *testing.T) {
		// By node totals (32 GiB, 14 free) kube-scheduler would evict one
		// 9 GiB pod per node, for a pod no card can ever hold.
		addNodes("big", "big-1", "big-2")
		lows := []string{"big-a", "big-b", "big-c", "big-d"}
		for _, n := range lows {
			place(pod("big", n, classLow, 9).Obj())
		}
		c.createPod(t, pod("big", "big-high", classHigh, 17).Obj())
		msg := c.waitUnschedulable(t, "big-high")
		if !strings.Contains(msg, "preemption") {
			t.Errorf("big-high's PodScheduled message does not mention a preemption attempt: %q", msg)
		}
		c.holdOff(t, 5*time.Second, lows...)
	})

	t.Run("a PodDisruptionBudget protects its pods", func(t *testing.T) {
		addNodes("pdb1", "pdb-1")
		// The younger pod is the only one the budget covers: without it,
		// of two equal pods the younger would go.
		place(pod("pdb1", "pdb-free", classLow, 9).Obj(), pod("pdb1", "pdb-kept", classLow, 9).Label("app", "db").Obj())
		c.setRunning(t, "pdb-free", "pdb-kept")
		c.createBudget(t, "db", "db", 0)
		c.createPod(t, pod("pdb1", "pdb-high", classHigh, 14).Obj())
		victims := c.waitTerminating(t, 1, "pdb-free", "pdb-kept")
		if victims[0] != "pdb-free" {
			t.Fatalf("evicted %v, want pdb-free", victims)
		}
		c.finishTerminating(t, victims...)
		c.waitBound(t, []string{"pdb-high"}, afterVictimsBound)

		// Every candidate protected: nobody goes.
		addNodes("pdb2", "pdb-2")
		place(pod("pdb2", "pdb-x", classLow, 9).Label("app", "db").Obj(), pod("pdb2", "pdb-y", classLow, 9).Label("app", "db").Obj())
		c.setRunning(t, "pdb-x", "pdb-y")
		c.createPod(t, pod("pdb2", "pdb-high2", classHigh, 14).Obj())
		c.waitUnschedulable(t, "pdb-high2")
		c.holdOff(t, 5*time.Second, "pdb-kept", "pdb-x", "pdb-y")
	})

	t.Run("the room is kept while the victim terminates", func(t *testing.T) {
		addNodes("keep", "keep-1")
		place(pod("keep", "keep-a", classLow, 9).Obj(), pod("keep", "keep-b", classLow, 9).Obj())
		c.createPod(t, pod("keep", "keep-high", classHigh, 14).Obj())
		victims := c.waitTerminating(t, 1, "keep-a", "keep-b")
		// A pod of still higher priority that never preempts: kube-scheduler's
		// nomination does not keep the room from it (it outranks
		// keep-high), and the victim's card has 7 GiB free right now, the
		// other card 7 too; 8 GiB fits neither: only the victim's leaving
		// could make room for it, and that room is keep-high's.
		c.createPod(t, pod("keep", "keep-thief", classTop, 8).Obj())
		c.waitUnschedulable(t, "keep-thief")
		c.finishTerminating(t, victims...)
		c.waitBound(t, []string{"keep-high"}, afterVictimsBound)
		c.holdOff(t, 3*time.Second)
		if p, err := c.admin.CoreV1().Pods("default").Get(ctx, "keep-thief", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "" {
			t.Errorf("keep-thief bound to %q (err %v); the room was keep-high's", p.Spec.NodeName, err)
		}
		c.checkNoOvercommit(t)
	})

	t.Run("a pod an empty-selector budget protects keeps its card's other pods", func(t *testing.T) {
		// Review D5, issue 41 (a). Card 0: a (5) and team/b (5), which a
		// budget with selector {} and no disruption left covers; card 1:
		// peer (9), of the high pod's priority. 12 GiB fits a card only if
		// both a and b go: nobody may be evicted.
		addNodes("empty", "empty-1")
		c.createNamespace(t, "team")
		binpack := func(p *util.PodWrapper) *corev1.Pod {
			return p.Annotation(gpushare.AnnotationPolicy, allocator.NameBinpack).Obj()
		}
		place(binpack(pod("empty", "empty-a", classLow, 5)))
		b := binpack(pod("empty", "empty-b", classLow, 5).Namespace("team"))
		c.createPod(t, b)
		c.waitBoundIn(t, "team", []string{"empty-b"}, 30*time.Second)
		place(binpack(pod("empty", "empty-peer", classHigh, 9)))
		if cardOf(t, c, "empty-a") == cardOf(t, c, "empty-peer") {
			t.Fatal("empty-a and empty-peer share a card; the scenario needs a and b on one card, peer on the other")
		}
		c.setRunning(t, "empty-a", "empty-peer")
		c.setRunningIn(t, "team", "empty-b")
		c.createBudgetOver(t, "team", "everyone", &metav1.LabelSelector{}, 0)
		c.createPod(t, pod("empty", "empty-high", classHigh, 12).Obj())
		c.waitUnschedulable(t, "empty-high")
		c.holdOff(t, 5*time.Second, "empty-a", "empty-peer")
		c.expectUntouchedIn(t, "team", "empty-b")
	})

	t.Run("a cordoned node with free cards does not stop a preemption", func(t *testing.T) {
		// Review D4, issue 41 (b): 110 nodes whose two cards each hold a
		// 9 GiB pod, and a cordoned node with both cards free. Above 100
		// nodes kube-scheduler sends the extender only the first 100 that
		// pass its filters; the cordoned node is not among them, and no
		// reason to evict nobody.
		var names, lows []string
		for i := range 110 {
			names = append(names, fmt.Sprintf("wide-%03d", i))
		}
		addNodes("wide", names...)
		c.addNode(t, util.MakeNode("wide-cordoned").Cards("Tesla-T4", 16, 16).Label(scenarioLabel, "wide").Unschedulable().Obj())
		nodes++
		waitExtenderNodes(t, c, nodes)
		for i := range 220 {
			lows = append(lows, fmt.Sprintf("wide-low-%03d", i))
			c.createPod(t, pod("wide", lows[i], classLow, 9).Obj())
		}
		c.waitBound(t, lows, 120*time.Second)
		c.createPod(t, pod("wide", "wide-high", classHigh, 14).Obj())
		victims := c.waitTerminating(t, 1, lows...)
		c.finishTerminating(t, victims...)
		c.waitBound(t, []string{"wide-high"}, afterVictimsBound)
		c.expectUntouched(t, except(lows, victims)...)
		c.checkNoOvercommit(t)
	})

	t.Run("a burst over a full cluster evicts one pod per high pod", func(t *testing.T) {
		// 4 nodes, 8 cards, two 8 GiB pods on each: 16 full cards. Eight
		// 8 GiB high pods each need one victim.
		names := []string{"burst-1", "burst-2", "burst-3", "burst-4"}
		addNodes("burst", names...)
		var lows []string
		for i := range 16 {
			lows = append(lows, fmt.Sprintf("burst-low-%02d", i))
		}
		for _, n := range lows {
			c.createPod(t, pod("burst", n, classLow, 8).Obj())
		}
		c.waitBound(t, lows, 60*time.Second)
		var highs []string
		for i := range 8 {
			highs = append(highs, fmt.Sprintf("burst-high-%d", i))
			c.createPod(t, pod("burst", highs[i], classHigh, 8).Obj())
		}
		victims := c.waitTerminating(t, 8, lows...)
		c.holdOff(t, 3*time.Second, except(lows, victims)...) // no ninth eviction
		c.finishTerminating(t, victims...)
		c.waitBound(t, highs, afterVictimsBound)
		c.expectUntouched(t, except(lows, victims)...)
		c.checkNoOvercommit(t)
	})
}

// except returns the names of all not in gone.
func except(all, gone []string) []string {
	var out []string
	for _, n := range all {
		if !slices.Contains(gone, n) {
			out = append(out, n)
		}
	}
	return out
}

// waitTerminating waits until n of the named pods are terminating (evicted,
// and kept by their grace period as without a kubelet) and returns them.
func (c *cluster) waitTerminating(t *testing.T, n int, names ...string) []string {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		got = got[:0]
		for _, name := range names {
			p, err := c.admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err == nil && p.DeletionTimestamp != nil {
				got = append(got, name)
			}
		}
		return len(got) >= n, nil
	})
	if err != nil {
		t.Fatalf("%d of %v terminating, want %d (logs: %s)", len(got), names, n, c.cp.LogsDir())
	}
	if len(got) > n {
		t.Errorf("%d pods evicted, want %d: %v", len(got), n, got)
	}
	return got
}

// waitNominated waits until pod name has a status.nominatedNodeName and
// returns it.
func (c *cluster) waitNominated(t *testing.T, name string) string {
	t.Helper()
	var node string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		node = p.Status.NominatedNodeName
		return node != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s never nominated to a node", name)
	}
	return node
}

// waitUnschedulable waits until kube-scheduler has tried pod name and
// found no node, and returns its PodScheduled message.
func (c *cluster) waitUnschedulable(t *testing.T, name string) string {
	t.Helper()
	var msg string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil || !util.SchedulingFailed(p) {
			return false, nil
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				msg = cond.Message
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("kube-scheduler never reported pod %s unschedulable", name)
	}
	return msg
}

// holdOff waits d (kube-scheduler retries the pending pods meanwhile, on
// the events the other scenarios make) and then checks that none of the
// named pods was evicted.
func (c *cluster) holdOff(t *testing.T, d time.Duration, names ...string) {
	t.Helper()
	time.Sleep(d)
	c.expectUntouched(t, names...)
}

// expectUntouched fails for each named pod that is gone or terminating.
func (c *cluster) expectUntouched(t *testing.T, names ...string) {
	t.Helper()
	c.expectUntouchedIn(t, "default", names...)
}

// expectUntouchedIn is expectUntouched for pods of namespace ns.
func (c *cluster) expectUntouchedIn(t *testing.T, ns string, names ...string) {
	t.Helper()
	for _, n := range names {
		p, err := c.admin.CoreV1().Pods(ns).Get(context.Background(), n, metav1.GetOptions{})
		switch {
		case err != nil:
			t.Errorf("pod %s: %v", n, err)
		case p.DeletionTimestamp != nil:
			t.Errorf("pod %s was evicted", n)
		}
	}
}

// finishTerminating plays the kubelet once the named pods' containers have
// stopped: it deletes them for good.
func (c *cluster) finishTerminating(t *testing.T, names ...string) {
	t.Helper()
	zero := int64(0)
	for _, n := range names {
		if err := c.admin.CoreV1().Pods("default").Delete(context.Background(), n, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
	}
}

// setRunning plays the kubelet starting the named pods: Running and Ready,
// which is when the Eviction API counts them against their budget. The
// first started a minute before the second, and so on.
func (c *cluster) setRunning(t *testing.T, names ...string) {
	t.Helper()
	c.setRunningIn(t, "default", names...)
}

// setRunningIn is setRunning for pods of namespace ns.
func (c *cluster) setRunningIn(t *testing.T, ns string, names ...string) {
	t.Helper()
	ctx := context.Background()
	for i, n := range names {
		p, err := c.admin.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.Now()
		started := metav1.NewTime(now.Add(time.Duration(i-len(names)) * time.Minute))
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &started
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now})
		if _, err := c.admin.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// createBudget creates PodDisruptionBudget name over the pods labelled
// app=app, and sets its status as the disruption controller (which this
// control plane does not run) would: allowed disruptions, processed.
func (c *cluster) createBudget(t *testing.T, name, app string, allowed int32) {
	t.Helper()
	c.createBudgetOver(t, "default", name, &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, allowed)
}

// createBudgetOver is createBudget in namespace ns over the pods selector
// selects.
func (c *cluster) createBudgetOver(t *testing.T, ns, name string, selector *metav1.LabelSelector, allowed int32) {
	t.Helper()
	ctx := context.Background()
	one := intstr.FromInt32(1)
	pdb, err := c.admin.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: selector},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pdb.Status = policyv1.PodDisruptionBudgetStatus{ObservedGeneration: pdb.Generation, DisruptionsAllowed: allowed,
		CurrentHealthy: 1, DesiredHealthy: 1, ExpectedPods: 1}
	if _, err := c.admin.PolicyV1().PodDisruptionBudgets(ns).UpdateStatus(ctx, pdb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// cardOf returns the index of the card pod name's allocation holds.
func cardOf(t *testing.T, c *cluster, name string) int {
	t.Helper()
	a := allocationOf(t, c.admin, name)
	for idx := range a.PerCard() {
		return idx
	}
	t.Fatalf("pod %s holds no card", name)
	return -1
}
