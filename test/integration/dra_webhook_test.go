package integration

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/webhook"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

const draSelector = "gpushare.io/device-mode=dra"

// onDRANodes gives p the nodeSelector of the DRA nodes.
func onDRANodes(p *corev1.Pod) *corev1.Pod {
	p.Spec.NodeSelector = map[string]string{"gpushare.io/device-mode": "dra"}
	return p
}

func withDRAConversion(c *extender.Config) {
	c.WebhookDRANodeSelector, c.WebhookDRAUnit = draSelector, gpushare.UnitGiB
}

// TestDRAConversionWebhook: with --webhook-dra-node-selector, the webhook
// registered by config/mutating-webhook.yaml converts, through a real
// kube-apiserver (DRAConsumableCapacity on: DRA sharing's 1.36 default),
// pods asking aliyun.com/gpu-mem that select the DRA nodes: the stored pod
// asks no gpu-mem and names the claim made from gpushare-gpu-mem-<size>,
// which exists in its namespace with draclaim's spec (one per size and
// namespace, shared by the pods of that size); a dry run stores neither;
// a pod with gpu-mem in two containers is refused with the reason; pods
// not selecting DRA nodes still get the scheduler's name.
func TestDRAConversionWebhook(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	cp := framework.StartT(t, framework.Options{APIServerFeatureGates: map[string]bool{"DRAConsumableCapacity": true}})
	w := startWebhook(t, cp, withDRAConversion)
	if _, err := w.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	templates := func(ns string) map[string]string { // name -> memory asked
		list, err := w.admin.ResourceV1().ResourceClaimTemplates(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, tmpl := range list.Items {
			want := draclaim.Template(resource.NewQuantity(0, resource.BinarySI))
			mem := "?"
			if r := tmpl.Spec.Spec.Devices.Requests; len(r) == 1 && r[0].Exactly != nil && r[0].Exactly.Capacity != nil {
				q := r[0].Exactly.Capacity.Requests[draclaim.MemoryCapacity]
				mem = q.String()
				want = draclaim.Template(&q)
			}
			if diff := cmp.Diff(want.Spec, tmpl.Spec); diff != "" {
				t.Errorf("template %s/%s as stored differs from draclaim's (-want +got):\n%s", ns, tmpl.Name, diff)
			}
			got[tmpl.Name] = mem
		}
		return got
	}
	checkConverted := func(t *testing.T, p *corev1.Pod, template string) {
		t.Helper()
		if _, err := gpushare.PodDemand(p); !errors.Is(err, gpushare.ErrNoGPUMem) {
			t.Errorf("the stored pod still asks GPU memory (%v): %+v", err, p.Spec.Containers[0].Resources)
		}
		want := []corev1.PodResourceClaim{{Name: draclaim.ClaimName, ResourceClaimTemplateName: &template}}
		if diff := cmp.Diff(want, p.Spec.ResourceClaims); diff != "" {
			t.Errorf("the pod's claims (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]corev1.ResourceClaim{{Name: draclaim.ClaimName}}, p.Spec.Containers[0].Resources.Claims); diff != "" {
			t.Errorf("the container's claims (-want +got):\n%s", diff)
		}
		if p.Spec.SchedulerName != corev1.DefaultSchedulerName {
			t.Errorf("schedulerName %q, want the pod's own (default-scheduler)", p.Spec.SchedulerName)
		}
		if p.Annotations[draclaim.AnnotationConverted] == "" {
			t.Errorf("no %s annotation: %v", draclaim.AnnotationConverted, p.Annotations)
		}
	}

	t.Run("dry run stores nothing", func(t *testing.T) {
		p, err := w.create(ctx, onDRANodes(util.MakePod("dry").GPUMem(4).Obj()), true)
		if err != nil {
			t.Fatal(err)
		}
		checkConverted(t, p, "gpushare-gpu-mem-4gi")
		if _, err := w.admin.ResourceV1().ResourceClaimTemplates("default").Get(ctx, "gpushare-gpu-mem-4gi", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a dry run left a template (get: %v)", err)
		}
	})
	t.Run("converted", func(t *testing.T) {
		for _, p := range []*corev1.Pod{
			onDRANodes(util.MakePod("a").GPUMem(8).Obj()),
			onDRANodes(util.MakePod("b").GPUMem(8).Obj()),
			onDRANodes(util.MakePod("c").GPUMem(4).Obj()),
			onDRANodes(util.MakePod("d").Namespace("team-a").GPUMem(8).Obj()),
		} {
			got, err := w.create(ctx, p, false)
			if err != nil {
				t.Fatalf("creating %s/%s: %v", p.Namespace, p.Name, err)
			}
			checkConverted(t, got, draclaim.TemplatePrefix+map[int64]string{8: "8gi", 4: "4gi"}[p.Spec.Containers[0].Resources.Limits.Name(gpushare.ResourceGPUMem, resource.DecimalSI).Value()])
		}
		if diff := cmp.Diff(map[string]string{"gpushare-gpu-mem-8gi": "8Gi", "gpushare-gpu-mem-4gi": "4Gi"}, templates("default")); diff != "" {
			t.Errorf("templates in default (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(map[string]string{"gpushare-gpu-mem-8gi": "8Gi"}, templates("team-a")); diff != "" {
			t.Errorf("templates in team-a (-want +got):\n%s", diff)
		}
	})
	t.Run("two GPU containers refused", func(t *testing.T) {
		_, err := w.create(ctx, onDRANodes(util.MakePod("two").GPUMem(4).GPUMem(4).Obj()), false)
		if err == nil || !strings.Contains(err.Error(), "all ask aliyun.com/gpu-mem") || !strings.Contains(err.Error(), draSelector) {
			t.Errorf("err = %v, want the pod refused, naming the two containers and the node selector", err)
		}
	})
	t.Run("other pods still get the scheduler", func(t *testing.T) {
		p, err := w.create(ctx, util.MakePod("plain").GPUMem(4).Obj(), false)
		if err != nil || p.Spec.SchedulerName != webhook.DefaultSchedulerName || len(p.Spec.ResourceClaims) != 0 {
			t.Errorf("pod %+v (%v), want gpu-mem kept and schedulerName %s", p, err, webhook.DefaultSchedulerName)
		}
	})
	fams := scrapeMetrics(t, "http://"+w.metrics+"/metrics")
	for result, want := range map[string]float64{webhook.ResultConverted: 5, webhook.ResultDenied: 1} {
		if v, _ := metricValue(fams, "gpushare_webhook_admissions_total", map[string]string{"result": result}); v != want {
			t.Errorf("gpushare_webhook_admissions_total{result=%q} = %v, want %v", result, v, want)
		}
	}
}

// TestDRAConversionNeedsConsumableCapacity: on a kube-apiserver that drops
// a claim's capacity request (DRAConsumableCapacity off: v1.34 and v1.35
// as released, or turned off on a later one), the webhook refuses the pod
// saying so, and leaves no template.
func TestDRAConversionNeedsConsumableCapacity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	cp := framework.StartT(t, framework.Options{APIServerFeatureGates: map[string]bool{"DRAConsumableCapacity": false}})
	w := startWebhook(t, cp, withDRAConversion)
	_, err := w.create(ctx, onDRANodes(util.MakePod("a").GPUMem(8).Obj()), false)
	if err == nil || !strings.Contains(err.Error(), "DRAConsumableCapacity") || !strings.Contains(err.Error(), "1.36") {
		t.Errorf("err = %v, want the pod refused, naming DRAConsumableCapacity and Kubernetes 1.36", err)
	}
	list, err := w.admin.ResourceV1().ResourceClaimTemplates("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Errorf("%d templates left behind, want none", len(list.Items))
	}
}
