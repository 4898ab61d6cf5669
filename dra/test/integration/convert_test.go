package integration

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/webhook"
	"github.com/gpushare/gpushare/test/util"
)

// createConverted does what the webhook does for a pod asking gib GiB of
// aliyun.com/gpu-mem on the DRA nodes (gpushare.io/device-mode=dra):
// draclaim's conversion, its template made through the API
// (webhook.ClientTemplates), the patch applied to the pod as kube-apiserver
// applies a webhook's; then creates the pod.
func (c *draCluster) createConverted(t *testing.T, name string, gib int64) {
	t.Helper()
	c.createConvertedWith(t, name, gib, false)
}

// createConvertedWith is createConverted with the webhook's nodeChoice
// (the marker gpushare.io/dra-claim; the scheduler name is left as it is).
func (c *draCluster) createConvertedWith(t *testing.T, name string, gib int64, nodeChoice bool) {
	t.Helper()
	pod := util.MakePod(name).GPUMem(gib).Obj()
	pod.UID = ""
	pod.Spec.NodeSelector = map[string]string{"gpushare.io/device-mode": "dra"}
	c.convertAndCreate(t, pod, nodeChoice)
}

// convertAndCreate converts pod (asking GiB of aliyun.com/gpu-mem) as the
// webhook does, with nodeChoice, and creates it.
func (c *draCluster) convertAndCreate(t *testing.T, pod *corev1.Pod, nodeChoice bool) {
	t.Helper()
	ctx := context.Background()
	conv, err := draclaim.Convert(pod, gpushare.UnitGiB, nodeChoice)
	if err != nil {
		t.Fatal(err)
	}
	if err := (webhook.ClientTemplates{Client: c.admin}).Ensure(ctx, pod.Namespace, conv.Template, false); err != nil {
		t.Fatal(err)
	}
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(conv.Patch)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	if doc, err = patch.Apply(doc); err != nil {
		t.Fatal(err)
	}
	var converted corev1.Pod
	if err := json.Unmarshal(doc, &converted); err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.CoreV1().Pods(pod.Namespace).Create(ctx, &converted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestConvertedPodsShareACard: pods asking aliyun.com/gpu-mem 4, 8 and 4
// (GiB), converted as the webhook converts pods bound for DRA nodes, are
// allocated by the real 1.37 kube-scheduler on one 16 GiB card of the
// driver's slice through the claims kube-controller-manager makes from the
// webhook's templates; a fourth of 8 waits; the driver prepares the three
// and counts the card full. This is the half of the webhook route that
// needs Kubernetes 1.36+ (test/integration TestDRAConversionWebhook has the
// admission half on a real kube-apiserver).
func TestConvertedPodsShareACard(t *testing.T) {
	c := startDRA(t, map[string]string{"dra-a": "1xTesla-T4:16GiB"})
	ctx := context.Background()
	labels, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"gpushare.io/device-mode": "dra"}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.CoreV1().Nodes().Patch(ctx, "dra-a", types.MergePatchType, labels, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	node := c.nodes["dra-a"]
	for _, s := range []struct {
		pod string
		gib int64
	}{{"a-4", 4}, {"b-8", 8}, {"c-4", 4}} {
		c.createConverted(t, s.pod, s.gib)
		pod := c.waitPod(t, s.pod, true)
		claim, err := c.podClaimNamed(ctx, pod, draclaim.ClaimName)
		if err != nil {
			t.Fatal(err)
		}
		if got := allocationOf(t, claim); got.pool != "dra-a" || got.device != "gpu-0" || got.mib != s.gib<<10 {
			t.Errorf("pod %s: allocation %+v, want %d MiB of dra-a/gpu-0", s.pod, got, s.gib<<10)
		}
		if _, err := node.prepare(ctx, claim); err != nil {
			t.Errorf("preparing pod %s's claim: %v", s.pod, err)
		}
	}
	if got := node.driver.State().Used()["gpu-0"]; got != 16384 {
		t.Errorf("the driver counts %d MiB prepared on gpu-0, want 16384", got)
	}
	c.createConverted(t, "d-8", 8)
	if msg := podScheduledMessage(c.waitPod(t, "d-8", false)); !strings.Contains(msg, "cannot allocate all claims") {
		t.Errorf("d-8 waits saying %q, want DRA's \"cannot allocate all claims\"", msg)
	}
	for _, size := range []string{"4gi", "8gi"} {
		if _, err := c.admin.ResourceV1().ResourceClaimTemplates("default").Get(ctx, draclaim.TemplatePrefix+size, metav1.GetOptions{}); err != nil {
			t.Errorf("template %s%s: %v", draclaim.TemplatePrefix, size, err)
		}
	}
}
