package integration

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// TestIsolationThroughRealScheduler drives pods annotated
// gpushare.io/isolation: enforced through kube-scheduler and the extender:
//
//  1. Node "plain" publishes an inventory from before isolation (no
//     field: none); node "mixed" has card 0 in mps mode and card 1 in
//     none (e.g. MIG on). An enforced pod avoids plain and mixed's card 1
//     and lands on mixed card 0, where pods that do not ask also go.
//  2. The next enforced pod does not fit on mixed card 0: it waits, its
//     FailedScheduling event naming the cards not enforcing.
//  3. The device plugin on plain is upgraded and publishes driver mode on
//     card 1: the waiting pod lands there when kube-scheduler next retries
//     it (at once from backoff, within 5 minutes from its unschedulable
//     queue: the Node update changes no field its queueing hints watch).
func TestIsolationThroughRealScheduler(t *testing.T) {
	c := startCluster(t)
	c.addNode(t, util.MakeNode("plain").Cards("Tesla T4", 16, 16).Obj())
	c.addNode(t, util.MakeNode("mixed").Cards("A100-SXM4-40GB", 16, 16).
		Isolation(0, gpushare.IsolationMPS).Isolation(1, gpushare.IsolationNone).Obj())

	// 1. The enforced pod lands on the only enforcing card.
	c.createPod(t, util.MakePod("enforced-0").GPUMem(8).Enforced().Obj())
	c.waitBound(t, []string{"enforced-0"}, 30*time.Second)
	c.wantCards(t, "enforced-0", "GPU-mixed-0")

	// 2. Mixed card 0 has 8 GiB left: a 12 GiB enforced pod waits.
	c.createPod(t, util.MakePod("enforced-1").GPUMem(12).Enforced().Obj())
	c.waitEvent(t, "enforced-1", "all 2 GPUs excluded (memory limits not enforced: 2)")
	c.waitEvent(t, "enforced-1", "container c0 needs 12 GiB on one GPU enforcing memory limits; 1 GPU excluded (memory limits not enforced: 1); largest free eligible GPU has 8 of 16 GiB")
	c.wantPending(t, "enforced-1")

	// 3. plain's plugin now enforces on card 1.
	upgraded := util.MakeNode("plain").Cards("Tesla T4", 16, 16).Isolation(1, gpushare.IsolationDriver).Obj()
	c.annotateNode(t, "plain", gpushare.AnnotationInventory, upgraded.Annotations[gpushare.AnnotationInventory])
	// An annotation-only Node update is no event any of kube-scheduler's
	// queueing hints reacts to: a pod already in its unschedulable queue is
	// retried when the queue is flushed, after at most 5 minutes
	// (podMaxInUnschedulablePodsDuration); one still in backoff, at once.
	c.waitBound(t, []string{"enforced-1"}, 6*time.Minute)
	c.wantCards(t, "enforced-1", "GPU-plain-1")
}
