package integration

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/certs/certstest"
	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/webhook"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// gpuMemoryQuota is the example quota the docs tell users to apply.
const gpuMemoryQuota = "manifests/examples/quota/gpu-memory.yaml"

// TestDRAConversionQuota runs the webhook as the chart renders it with the
// DRA driver (manifests/rendered/second-scheduler-dra-driver.yaml: the
// sidecar's flags, its account's RBAC and token, the
// MutatingWebhookConfiguration and the admission policies) on a real
// kube-apiserver, whose ResourceQuota admission runs after the webhook,
// with kube-controller-manager's quota controller. In team-a, quota'd by
// manifests/examples/quota/gpu-memory.yaml (16 on each path), a first
// 16 GiB pod bound for DRA nodes is converted, its memory carried by the
// marker and counted under requests.gpushare.io/dra-claim, and a second
// is refused by the quota; so is a second device-plugin pod after a first
// of 16. In team-b, whose quota limits only requests.aliyun.com/gpu-mem,
// the webhook refuses to convert, naming the quota and the fix. Without a
// quota, a pod that names the gpushare scheduler already is converted
// (review S6), and one asking aliyun.com/gpu-count: 1 loses it (D6).
func TestDRAConversionQuota(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	cp := framework.StartT(t, framework.Options{
		APIServerFeatureGates: map[string]bool{"DRAConsumableCapacity": true},
		Controllers:           []string{"resourcequota-controller"},
	})
	admin := cp.Client(framework.AdminUser)
	startChartWebhook(t, cp, admin, "second-scheduler-dra-driver.yaml")
	for _, ns := range []string{"team-a", "team-b"} {
		if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.Apply(ctx, admin, filepath.Join(root, gpuMemoryQuota)); err != nil {
		t.Fatal(err)
	}
	gpuMemOnly := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "gpu-mem-only", Namespace: "team-b"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"requests.aliyun.com/gpu-mem": resource.MustParse("16")}}}
	if _, err := admin.CoreV1().ResourceQuotas("team-b").Create(ctx, gpuMemOnly, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// ResourceQuota admission enforces a quota once the controller has
	// written its status.
	waitQuotaStatus(t, admin, "team-a", "gpu-memory")

	create := func(p *corev1.Pod) (*corev1.Pod, error) {
		p = p.DeepCopy()
		p.UID = ""
		return admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	}
	dra := func(name, ns string, gib int64) *corev1.Pod {
		return onDRANodes(util.MakePod(name).Namespace(ns).GPUMem(gib).Obj())
	}

	t.Run("a converted pod counts under the marker", func(t *testing.T) {
		p, err := create(dra("dra-1", "team-a", 16))
		if err != nil {
			t.Fatal(err)
		}
		checkMarker(t, p, 16, webhook.DefaultSchedulerName)
		q, err := admin.CoreV1().ResourceQuotas("team-a").Get(ctx, "gpu-memory", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if used := q.Status.Used["requests.gpushare.io/dra-claim"]; used.Value() != 16 {
			t.Errorf("quota team-a/gpu-memory used %v, want requests.gpushare.io/dra-claim: 16", q.Status.Used)
		}
	})
	t.Run("a second converted pod is over the quota", func(t *testing.T) {
		_, err := create(dra("dra-2", "team-a", 16))
		if err == nil || !strings.Contains(err.Error(), "exceeded quota: gpu-memory") || !strings.Contains(err.Error(), "requests.gpushare.io/dra-claim=16") {
			t.Errorf("err = %v, want the pod refused by ResourceQuota gpu-memory on requests.gpushare.io/dra-claim", err)
		}
	})
	t.Run("the device plugin's path has its own limit", func(t *testing.T) {
		if _, err := create(util.MakePod("dp-1").Namespace("team-a").GPUMem(16).Obj()); err != nil {
			t.Fatal(err)
		}
		_, err := create(util.MakePod("dp-2").Namespace("team-a").GPUMem(1).Obj())
		if err == nil || !strings.Contains(err.Error(), "exceeded quota: gpu-memory") || !strings.Contains(err.Error(), "requests.aliyun.com/gpu-mem=1") {
			t.Errorf("err = %v, want the pod refused by ResourceQuota gpu-memory on requests.aliyun.com/gpu-mem", err)
		}
	})
	t.Run("a quota that would not count the conversion refuses it", func(t *testing.T) {
		_, err := create(dra("dra-b", "team-b", 8))
		for _, want := range []string{"ResourceQuota team-b/gpu-mem-only limits requests.aliyun.com/gpu-mem to 16 but not requests.gpushare.io/dra-claim",
			"this pod's 8 GiB would escape it; add requests.gpushare.io/dra-claim", draSelector} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v, want the webhook's refusal containing %q", err, want)
			}
		}
		if list, err := admin.ResourceV1().ResourceClaimTemplates("team-b").List(ctx, metav1.ListOptions{}); err != nil || len(list.Items) != 0 {
			t.Errorf("templates in team-b: %v (%v), want none", list, err)
		}
	})
	t.Run("a pod naming the gpushare scheduler is converted", func(t *testing.T) {
		p := dra("named", "default", 4)
		p.Spec.SchedulerName = webhook.DefaultSchedulerName
		got, err := create(p)
		if err != nil {
			t.Fatal(err)
		}
		checkMarker(t, got, 4, webhook.DefaultSchedulerName)
	})
	t.Run("gpu-count 1 goes with the conversion", func(t *testing.T) {
		got, err := create(onDRANodes(util.MakePod("count-one").GPUMemCards(8, 1).Obj()))
		if err != nil {
			t.Fatal(err)
		}
		checkMarker(t, got, 8, webhook.DefaultSchedulerName)
	})
}

// checkMarker checks that p, as stored, was converted: no aliyun.com/gpu-mem
// or gpu-count left, the claim named, the marker of units in limits and
// requests, and scheduler as its scheduler.
func checkMarker(t *testing.T, p *corev1.Pod, units int64, scheduler string) {
	t.Helper()
	if _, err := gpushare.PodDemand(p); !errors.Is(err, gpushare.ErrNoGPUMem) {
		t.Errorf("pod %s still asks GPU memory (%v)", p.Name, err)
	}
	r := p.Spec.Containers[0].Resources
	want := corev1.ResourceList{gpushare.ResourceDRAClaim: *resource.NewQuantity(units, resource.DecimalSI)}
	for field, got := range map[string]corev1.ResourceList{"limits": r.Limits, "requests": r.Requests} {
		if !cmp.Equal(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })) {
			t.Errorf("pod %s %s %v, want %v", p.Name, field, got, want)
		}
	}
	if diff := cmp.Diff([]corev1.ResourceClaim{{Name: draclaim.ClaimName}}, r.Claims); diff != "" {
		t.Errorf("pod %s container's claims (-want +got):\n%s", p.Name, diff)
	}
	if p.Spec.SchedulerName != scheduler {
		t.Errorf("pod %s schedulerName %q, want %q", p.Name, p.Spec.SchedulerName, scheduler)
	}
}

// waitQuotaStatus waits until kube-controller-manager has written the
// status of quota namespace/name: its hard limits and their usage.
func waitQuotaStatus(t *testing.T, admin kubernetes.Interface, namespace, name string) {
	t.Helper()
	var last *corev1.ResourceQuota
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		q, err := admin.CoreV1().ResourceQuotas(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = q
		for r := range q.Spec.Hard {
			if _, ok := q.Status.Used[r]; !ok {
				return false, nil
			}
		}
		return len(q.Status.Hard) == len(q.Spec.Hard), nil
	})
	if err != nil {
		t.Fatalf("the quota controller never wrote the status of ResourceQuota %s/%s: %v (last: %+v)", namespace, name, err, last)
	}
}

// startChartWebhook runs the chart's sidecar from the rendering file (its
// flags, as its account with the chart's RBAC and admission policies) and
// registers the chart's MutatingWebhookConfiguration pointed at it; it
// returns once kube-apiserver calls it.
func startChartWebhook(t *testing.T, cp *framework.ControlPlane, admin kubernetes.Interface, file string) {
	t.Helper()
	ctx := context.Background()
	chart := loadRenderedFor(t, cp.Version(), file)
	chart.applyAccess(t, admin)
	kc, err := cp.ServiceAccountKubeconfig(ctx, systemNamespace, chart.tokenAccount(t, "gpushare-scheduler", "extender"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ca := certstest.NewCA(t, "webhook-ca")
	tlsDir := t.TempDir()
	certstest.WriteSecretVolume(t, tlsDir, certstest.SecretFiles(ca, ca.Server(t)))
	hook := util.FreeAddr(t)
	sidecar := chart.container(t, "gpushare-scheduler", "extender")
	ext := startChartExtender(t, rewriteArgs(t, sidecar.Args, map[string]string{
		"--listen": util.FreeAddr(t), "--metrics-listen": util.FreeAddr(t), "--webhook-listen": hook,
		"--webhook-tls-cert-file": filepath.Join(tlsDir, certstest.CertFile),
		"--webhook-tls-key-file":  filepath.Join(tlsDir, certstest.KeyFile),
	}, "--kubeconfig="+kc, "--leader-elect-identity=gpushare-scheduler-a"))

	var mwc *admissionregistrationv1.MutatingWebhookConfiguration
	for _, o := range chart.objs {
		if m, ok := o.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
			mwc = m
		}
	}
	if mwc == nil {
		t.Fatalf("%s renders no MutatingWebhookConfiguration", file)
	}
	url := "https://" + hook + *mwc.Webhooks[0].ClientConfig.Service.Path
	mwc.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.PEM}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-apiserver calls a new webhook a moment after it is created.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p := util.MakePod("probe").GPUMem(1).Obj()
		p.UID = ""
		got, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && got.Spec.SchedulerName == webhook.DefaultSchedulerName, nil
	}); err != nil {
		t.Fatalf("the chart's webhook is never called: %v (extender log:\n%s)", err, ext.logs.String())
	}
}
