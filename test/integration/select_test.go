package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// TestCardChoiceThroughRealScheduler drives pods that choose their cards,
// and an operator's cordon, through kube-scheduler and the extender:
//
//  1. The only A100 is full: a pod asking gpu-models A100* waits, and its
//     FailedScheduling event carries the extender's reason (the T4s are
//     excluded by model).
//  2. The operator cordons one T4: pods that do not choose fill the other
//     one and no more; the next waits, its event naming the cordon.
//  3. The pod holding the A100 is deleted: the A100 pod lands on it.
//  4. Pods excluding the A100 by UUID wait (T4 cordoned or full), and once
//     the operator lifts the cordon land on that T4, never on the A100.
func TestCardChoiceThroughRealScheduler(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	c.addNode(t, util.MakeNode("t4").Cards("Tesla T4", 16, 16).Obj())
	c.addNode(t, util.MakeNode("a100").Cards("A100-SXM4-80GB", 80).Obj())

	c.createPod(t, util.MakePod("hog").GPUMem(80).GPUModels("A100*").Obj())
	c.waitBound(t, []string{"hog"}, 30*time.Second)
	c.wantCards(t, "hog", "GPU-a100-0")

	// 1. The A100 is full: kube-scheduler rejects a100 by its total, and
	// the extender t4 by model.
	c.createPod(t, util.MakePod("needs-a100").GPUMem(12).GPUModels("A100*").Obj())
	c.waitEvent(t, "needs-a100", "container c0 needs 12 GiB on one GPU of model A100*; all 2 GPUs excluded (model Tesla T4 not A100*: 2)")
	c.wantPending(t, "needs-a100")

	// 2. Cordon T4 card 0; pods that do not choose take card 1 only.
	c.annotateNode(t, "t4", gpushare.AnnotationCordonedGPUs, "GPU-t4-0")
	for _, name := range []string{"fill-0", "fill-1"} {
		c.createPod(t, util.MakePod(name).GPUMem(8).Obj())
	}
	c.waitBound(t, []string{"fill-0", "fill-1"}, 30*time.Second)
	c.wantCards(t, "fill-0", "GPU-t4-1")
	c.wantCards(t, "fill-1", "GPU-t4-1")
	c.createPod(t, util.MakePod("fill-2").GPUMem(8).Obj())
	c.waitEvent(t, "fill-2", "container c0 needs 8 GiB on one GPU; 1 GPU excluded (cordoned by the operator: 1); largest free eligible GPU has 0 of 16 GiB")
	c.wantPending(t, "fill-2")

	// 3. The A100 frees: the pod asking for it lands there.
	if err := c.admin.CoreV1().Pods("default").Delete(ctx, "hog", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	c.waitBound(t, []string{"needs-a100", "fill-2"}, 60*time.Second)
	c.wantCards(t, "needs-a100", "GPU-a100-0")
	c.wantCards(t, "fill-2", "GPU-a100-0") // T4 card 0 is still cordoned

	// 4. Pods that exclude the A100 wait while T4 card 0 is cordoned,
	// then land there once the operator lifts the cordon.
	excl := []string{"not-a100-0", "not-a100-1", "not-a100-2"}
	for _, name := range excl {
		c.createPod(t, util.MakePod(name).GPUMem(4).Annotation(gpushare.AnnotationGPUUUIDsExcluded, "GPU-a100-0").Obj())
	}
	c.waitEvent(t, "not-a100-0", "UUID excluded by the pod: 1")
	c.wantPending(t, excl...)
	c.annotateNode(t, "t4", gpushare.AnnotationCordonedGPUs, "")
	c.waitBound(t, excl, 60*time.Second)
	for _, name := range excl {
		c.wantCards(t, name, "GPU-t4-0")
	}
}

// wantCards checks that pod name's allocation annotation puts all its
// containers on the card with UUID uuid.
func (c *cluster) wantCards(t *testing.T, name, uuid string) {
	t.Helper()
	a := allocationOf(t, c.admin, name)
	for _, ca := range a.Containers {
		for _, d := range ca.Devices {
			if d.UUID != uuid {
				t.Errorf("pod %s container %s is on card %d (%s), want %s", name, ca.Name, d.Index, d.UUID, uuid)
			}
		}
	}
}

// wantPending checks that the named pods are not bound.
func (c *cluster) wantPending(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		p, err := c.admin.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Errorf("pod %s is bound to %s, want it pending", name, p.Spec.NodeName)
		}
	}
}

// waitEvent waits for a FailedScheduling event of pod name whose message
// contains want.
func (c *cluster) waitEvent(t *testing.T, name, want string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := c.admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedScheduling" {
				last = e.Message
				if strings.Contains(e.Message, want) {
					return true, nil
				}
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no FailedScheduling event of %s containing %q; last message %q (logs: %s)", name, want, last, c.cp.LogsDir())
	}
}

// annotateNode sets (or, with value "", empties) a node annotation, as an
// operator's kubectl annotate would.
func (c *cluster) annotateNode(t *testing.T, node, key, value string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}
