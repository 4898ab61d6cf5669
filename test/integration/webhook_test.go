package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/certs/certstest"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/webhook"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// TestSchedulerNameWebhook registers config/mutating-webhook.yaml with a
// real kube-apiserver, pointed at the extender's webhook listener, and
// creates pods through the API: those asking gpu-mem without a scheduler
// of their own get spec.schedulerName gpushare-scheduler, the others are
// left alone and, thanks to the matchConditions, never sent to the
// webhook, but for those naming gpushare-scheduler already (which the DRA
// conversion must see), answered unchanged. With the webhook down,
// failurePolicy Fail refuses GPU pods and only them.
func TestSchedulerNameWebhook(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	cp := framework.StartT(t, framework.Options{})
	w := startWebhook(t, cp, nil)
	create := w.create
	fams := scrapeMetrics(t, "http://"+w.metrics+"/metrics")
	mutatedBefore, _ := metricValue(fams, "gpushare_webhook_admissions_total", map[string]string{"result": webhook.ResultMutated})

	withScheduler := func(p *corev1.Pod, name string) *corev1.Pod { p.Spec.SchedulerName = name; return p }
	tests := []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{name: "gpu-mem", pod: util.MakePod("gpu").GPUMem(4).Obj(), want: webhook.DefaultSchedulerName},
		{name: "gpu-mem in an init container", pod: util.MakePod("init-gpu").InitGPUMem(4).Container("app").Obj(), want: webhook.DefaultSchedulerName},
		{name: "gpu-mem naming the default scheduler", pod: withScheduler(util.MakePod("default-gpu").GPUMem(4).Obj(), corev1.DefaultSchedulerName), want: webhook.DefaultSchedulerName},
		{name: "gpu-mem naming another scheduler", pod: withScheduler(util.MakePod("other-gpu").GPUMem(4).Obj(), "other-scheduler"), want: "other-scheduler"},
		{name: "gpu-mem naming the gpushare scheduler", pod: withScheduler(util.MakePod("named-gpu").GPUMem(4).Obj(), webhook.DefaultSchedulerName), want: webhook.DefaultSchedulerName},
		{name: "no gpu-mem", pod: util.MakePod("cpu").Container("app").Obj(), want: corev1.DefaultSchedulerName},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := create(ctx, tc.pod, false)
			if err != nil {
				t.Fatal(err)
			}
			if p.Spec.SchedulerName != tc.want {
				t.Errorf("schedulerName %q, want %q", p.Spec.SchedulerName, tc.want)
			}
		})
	}
	fams = scrapeMetrics(t, "http://"+w.metrics+"/metrics")
	if v, _ := metricValue(fams, "gpushare_webhook_admissions_total", map[string]string{"result": webhook.ResultMutated}); v-mutatedBefore != 3 {
		t.Errorf("mutated %v pods, want 3", v-mutatedBefore)
	}
	// Of the others only the pod naming gpushare-scheduler reached the
	// webhook (skipped): the matchConditions filtered out the rest in
	// kube-apiserver.
	for r, want := range map[string]float64{webhook.ResultSkipped: 1, webhook.ResultError: 0, webhook.ResultInvalid: 0} {
		if v, _ := metricValue(fams, "gpushare_webhook_admissions_total", map[string]string{"result": r}); v != want {
			t.Errorf("%v reviews with result %s, want %v", v, r, want)
		}
	}

	// The webhook down: failurePolicy Fail refuses GPU pods, no others.
	w.ext.stop()
	if _, err := create(ctx, util.MakePod("gpu-while-down").GPUMem(4).Obj(), false); err == nil || !strings.Contains(err.Error(), "scheduler-name.gpushare.io") {
		t.Errorf("GPU pod with the webhook down: err = %v, want refused naming the webhook", err)
	}
	if p, err := create(ctx, util.MakePod("cpu-while-down").Container("app").Obj(), false); err != nil || p.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("pod without gpu-mem with the webhook down: %v; want created as before", err)
	}
}

// servingWebhook is an extender serving the webhook, registered with a
// control plane's kube-apiserver by config/mutating-webhook.yaml.
type servingWebhook struct {
	ext     *servingExtender
	metrics string // the extender's metrics listener
	admin   kubernetes.Interface
}

// startWebhook runs the extender with its webhook (cfg adds settings),
// registers config/mutating-webhook.yaml pointed at it, and waits until
// kube-apiserver calls it.
func startWebhook(t *testing.T, cp *framework.ControlPlane, cfg func(*extender.Config)) *servingWebhook {
	t.Helper()
	ctx := context.Background()
	ca := certstest.NewCA(t, "webhook-ca")
	dir := t.TempDir()
	certstest.WriteSecretVolume(t, dir, certstest.SecretFiles(ca, ca.Server(t)))
	hook, metrics := util.FreeAddr(t), util.FreeAddr(t)
	c := extender.Config{Kubeconfig: cp.AdminKubeconfig(), Listen: util.FreeAddr(t), Policy: allocator.DefaultPolicy, QPS: 50, Burst: 100,
		MetricsListen: metrics, WebhookListen: hook, SchedulerName: webhook.DefaultSchedulerName,
		WebhookTLSCertFile: filepath.Join(dir, certstest.CertFile), WebhookTLSKeyFile: filepath.Join(dir, certstest.KeyFile)}
	if cfg != nil {
		cfg(&c)
	}
	w := &servingWebhook{ext: runExtender(t, c), metrics: metrics, admin: cp.Client(framework.AdminUser)}

	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.DecodeManifest(filepath.Join(root, "config", "mutating-webhook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	mwc, ok := objs[0].(*admissionregistrationv1.MutatingWebhookConfiguration)
	if len(objs) != 1 || !ok {
		t.Fatalf("config/mutating-webhook.yaml holds %d objects, the first a %T; want one MutatingWebhookConfiguration", len(objs), objs[0])
	}
	url := "https://" + hook + webhook.Path
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: ca.PEM}
	}
	if _, err := w.admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// kube-apiserver calls a new webhook a moment after it is created.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := w.create(ctx, util.MakePod("probe").GPUMem(1).Obj(), true)
		return err == nil && p.Spec.SchedulerName == webhook.DefaultSchedulerName, nil
	}); err != nil {
		t.Fatalf("the webhook is never called: %v (extender log:\n%s)", err, w.ext.logs.String())
	}
	return w
}

// create creates p (without its UID) in its namespace, or only tries to
// with dryRun.
func (w *servingWebhook) create(ctx context.Context, p *corev1.Pod, dryRun bool) (*corev1.Pod, error) {
	p = p.DeepCopy()
	p.UID = ""
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return w.admin.CoreV1().Pods(p.Namespace).Create(ctx, p, opts)
}
