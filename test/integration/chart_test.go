package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/certs/certstest"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// renderedChart is a file of manifests/rendered: the Helm chart's rendering
// of one combination of values, kept equal to the chart by test/chart
// (TestPlainManifests).
type renderedChart struct {
	objs []runtime.Object
}

func loadRendered(t *testing.T, file string) renderedChart {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := framework.DecodeManifest(filepath.Join(root, "manifests", "rendered", file))
	if err != nil {
		t.Fatal(err)
	}
	return renderedChart{objs: objs}
}

// container is the named container of the named Deployment.
func (r renderedChart) container(t *testing.T, deployment, name string) corev1.Container {
	t.Helper()
	for _, o := range r.objs {
		d, ok := o.(*appsv1.Deployment)
		if !ok || d.Name != deployment {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == name {
				return c
			}
		}
	}
	t.Fatalf("the chart renders no container %s in Deployment %s", name, deployment)
	return corev1.Container{}
}

// configMapData is a key of the named ConfigMap.
func (r renderedChart) configMapData(t *testing.T, name, key string) string {
	t.Helper()
	for _, o := range r.objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Name == name {
			return cm.Data[key]
		}
	}
	t.Fatalf("the chart renders no ConfigMap %s", name)
	return ""
}

// applyAccess creates the chart's service accounts, RBAC and admission
// policies as the admin, so the components run with exactly what the chart
// grants and under its policies.
func (r renderedChart) applyAccess(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	for _, obj := range r.objs {
		var err error
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = admin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = admin.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = admin.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = admin.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = admin.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			_, err = admin.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("applying %T of the chart: %v", obj, err)
		}
	}
}

// rewriteArgs replaces the values of the named flags ("--name=value"); a
// flag named in set but not in args is an error: the harness rewrites only
// what the chart passes. Flags in add are appended.
func rewriteArgs(t *testing.T, args []string, set map[string]string, add ...string) []string {
	t.Helper()
	out := make([]string, 0, len(args)+len(add))
	seen := map[string]bool{}
	for _, a := range args {
		name, _, ok := strings.Cut(a, "=")
		if v, rewrite := set[name]; ok && rewrite {
			a = name + "=" + v
			seen[name] = true
		}
		out = append(out, a)
	}
	for name := range set {
		if !seen[name] {
			t.Fatalf("the chart's arguments %v have no %s to rewrite", args, name)
		}
	}
	return append(out, add...)
}

// startChartExtender parses args with the extender's own flag parser and
// runs it (runExtender: until the test ends, ready on --metrics-listen).
func startChartExtender(t *testing.T, args []string) *servingExtender {
	t.Helper()
	var usage bytes.Buffer
	cfg, _, err := extender.ParseFlags(args, &usage)
	if err != nil {
		t.Fatalf("the chart's extender arguments %v: %v\n%s", args, err, usage.String())
	}
	return runExtender(t, cfg)
}

// TestChartSecondScheduler runs the second-scheduler topology from
// manifests/rendered/second-scheduler.yaml: the real kube-scheduler with
// the chart's KubeSchedulerConfiguration (leader election on, the chart's
// lease) and container flags, and the extender with the sidecar's flags,
// both as the chart's service account with only the chart's RBAC, under the
// chart's admission policies, and the chart's MutatingWebhookConfiguration.
// Rewritten for the harness: the kubeconfig, listen addresses and ports,
// the files' directories, the webhook's clientConfig (the test apiserver
// reaches no Service). Pods reach the scheduler by spec.schedulerName and
// through the webhook, and land on the cards only they fit.
func TestChartSecondScheduler(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	chart := loadRendered(t, "second-scheduler.yaml")
	cp := framework.StartT(t, framework.Options{})
	admin := cp.Client(framework.AdminUser)
	chart.applyAccess(t, admin)
	waitAnnotationsPolicy(t, admin)
	kc, err := cp.ServiceAccountKubeconfig(ctx, systemNamespace, extenderAccount, time.Hour)
	if err != nil {
		t.Fatal(err)
	}

	// The extender sidecar, its webhook's files where the Secret would be.
	ca := certstest.NewCA(t, "webhook-ca")
	tlsDir := t.TempDir()
	certstest.WriteSecretVolume(t, tlsDir, certstest.SecretFiles(ca, ca.Server(t)))
	listen, metrics, hook := freeAddr(t), freeAddr(t), freeAddr(t)
	sidecar := chart.container(t, "gpushare-scheduler", "extender")
	ext := startChartExtender(t, rewriteArgs(t, sidecar.Args, map[string]string{
		"--listen": listen, "--metrics-listen": metrics, "--webhook-listen": hook,
		"--webhook-tls-cert-file": filepath.Join(tlsDir, certstest.CertFile),
		"--webhook-tls-key-file":  filepath.Join(tlsDir, certstest.KeyFile),
	}, "--kubeconfig="+kc))

	// kube-scheduler with the chart's configuration and flags.
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(chart.configMapData(t, "gpushare-scheduler-config", "kube-scheduler-config.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["clientConnection"].(map[string]any)["kubeconfig"] = kc
	exts := cfg["extenders"].([]any)
	url := exts[0].(map[string]any)["urlPrefix"].(string)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("the chart's extender urlPrefix %s is not on the pod's loopback", url)
	}
	exts[0].(map[string]any)["urlPrefix"] = "http://" + listen + extender.Prefix
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "kube-scheduler-config.yaml")
	if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	bins, err := framework.EnsureBinaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	schedAddr := freeAddr(t)
	_, port, _ := strings.Cut(schedAddr, ":")
	sched := chart.container(t, "gpushare-scheduler", "kube-scheduler")
	if len(sched.Command) != 1 || sched.Command[0] != "kube-scheduler" {
		t.Fatalf("the chart runs %v, want kube-scheduler", sched.Command)
	}
	args := rewriteArgs(t, sched.Args, map[string]string{"--config": cfgPath, "--secure-port": port}, "--bind-address=127.0.0.1")
	logPath := filepath.Join(cp.LogsDir(), "chart-kube-scheduler.log")
	proc, err := framework.StartProc("kube-scheduler", bins.Scheduler, args, logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proc.Stop(10 * time.Second) })
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health check of a self-signed scheduler
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		resp, err := insecure.Get("https://" + schedAddr + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("kube-scheduler never ready: %v\n%s", err, framework.Tail(logPath, 30))
	}
	// It schedules only once it holds the chart's lease.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := admin.CoordinationV1().Leases(systemNamespace).Get(ctx, "gpushare-scheduler", metav1.GetOptions{})
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	}); err != nil {
		t.Fatalf("kube-scheduler never took the lease kube-system/gpushare-scheduler: %v\n%s", err, framework.Tail(logPath, 30))
	}

	// The chart's webhook, pointed at the sidecar.
	var mwc *admissionregistrationv1.MutatingWebhookConfiguration
	for _, o := range chart.objs {
		if m, ok := o.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
			mwc = m
		}
	}
	if mwc == nil {
		t.Fatal("the chart renders no MutatingWebhookConfiguration")
	}
	hookURL := "https://" + hook + "/mutate-pods"
	if got := *mwc.Webhooks[0].ClientConfig.Service.Path; got != "/mutate-pods" {
		t.Fatalf("the chart's webhook path is %s", got)
	}
	mwc.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &hookURL, CABundle: ca.PEM}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	c := &cluster{cp: cp, admin: admin, kubeconfig: kc, listen: listen, stop: ext.stop}
	// Cards of 16 and 8 GiB: 12 GiB fits card 0 only; then 8 GiB fits
	// card 1 only (card 0 has 4 left).
	c.addNode(t, util.MakeNode("n1").Cards("Tesla-T4", 16, 8).Obj())
	byName := util.MakePod("by-name").GPUMem(12).Obj()
	byName.UID = ""
	byName.Spec.SchedulerName = "gpushare-scheduler"
	if _, err := admin.CoreV1().Pods("default").Create(ctx, byName, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitBound(t, []string{"by-name"}, 60*time.Second)
	// No schedulerName: the webhook routes it (kube-apiserver calls a new
	// webhook a moment after it is created, so retry the create).
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p := util.MakePod("by-webhook").GPUMem(8).Obj()
		p.UID = ""
		p.Spec.SchedulerName = ""
		created, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return false, nil
		}
		if created.Spec.SchedulerName != "gpushare-scheduler" {
			_ = admin.CoreV1().Pods("default").Delete(ctx, p.Name, metav1.DeleteOptions{})
			return false, nil
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the webhook never routed a GPU pod: %v (extender log:\n%s)", err, ext.logs.String())
	}
	c.waitBound(t, []string{"by-webhook"}, 60*time.Second)
	for name, card := range map[string]int{"by-name": 0, "by-webhook": 1} {
		p, err := admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := gpushare.ParseAllocation(p.Annotations[gpushare.AnnotationAllocation])
		if err != nil {
			t.Fatalf("pod %s: %v", name, err)
		}
		if got := a.PerCard(); len(got) != 1 || got[card] == 0 {
			t.Errorf("pod %s holds %v (card -> units); want only card %d", name, got, card)
		}
	}
	if got := c.checkNoOvercommit(t); got != 2 {
		t.Errorf("checked %d pods, want 2", got)
	}
	// A pod without gpu-mem keeps the default scheduler (none runs here):
	// ours leaves it alone.
	cpu := util.MakePod("cpu").Container("app").Obj()
	cpu.UID = ""
	created, err := admin.CoreV1().Pods("default").Create(ctx, cpu, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Spec.SchedulerName != corev1.DefaultSchedulerName {
		t.Errorf("CPU pod: schedulerName %q; want default-scheduler", created.Spec.SchedulerName)
	}
}

// TestChartExtenderOverHTTPS runs the extender topology from
// manifests/rendered/extender.yaml: the extender with the chart's
// Deployment flags (HTTPS, client CA, metrics listener) as the chart's
// service account, and the real kube-scheduler with the
// KubeSchedulerConfiguration of the chart's ConfigMap, the stanza NOTES.txt
// prints (test/chart checks they are equal), with a client certificate of
// the CA that signed the extender's, as the chart's Secrets hold them.
// Rewritten: the URL (a Service address the harness cannot reach), the
// tlsConfig files' directory, listen addresses. A client without a
// certificate is refused.
func TestChartExtenderOverHTTPS(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	chart := loadRendered(t, "extender.yaml")
	// One CA signs both, as the chart's Helm-generated Secrets.
	ca := certstest.NewCA(t, "gpushare-extender-ca")
	extDir, schedDir := t.TempDir(), t.TempDir()
	certstest.WriteSecretVolume(t, extDir, certstest.SecretFiles(ca, ca.Server(t)))
	certstest.WriteSecretVolume(t, schedDir, certstest.SecretFiles(ca, ca.Client(t, "gpushare-kube-scheduler")))

	cfgPath := filepath.Join(t.TempDir(), "kube-scheduler-config.yaml")
	if err := os.WriteFile(cfgPath, []byte(chart.configMapData(t, "gpushare-kube-scheduler-config", "kube-scheduler-config.yaml")), 0o600); err != nil {
		t.Fatal(err)
	}
	listen, metrics := freeAddr(t), freeAddr(t)
	cp := framework.StartT(t, framework.Options{
		ExtenderURL:     "https://" + listen + extender.Prefix,
		SchedulerConfig: cfgPath,
		ExtenderTLS: &framework.ExtenderTLS{CertFile: filepath.Join(schedDir, certstest.CertFile),
			KeyFile: filepath.Join(schedDir, certstest.KeyFile), CAFile: filepath.Join(schedDir, certstest.CAFile)},
	})
	admin := cp.Client(framework.AdminUser)
	chart.applyAccess(t, admin)
	kc, err := cp.ServiceAccountKubeconfig(ctx, systemNamespace, extenderAccount, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	main := chart.container(t, "gpushare-scheduler-extender", "extender")
	ext := startChartExtender(t, rewriteArgs(t, main.Args, map[string]string{
		"--listen": listen, "--metrics-listen": metrics,
		"--tls-cert-file":  filepath.Join(extDir, certstest.CertFile),
		"--tls-key-file":   filepath.Join(extDir, certstest.KeyFile),
		"--client-ca-file": filepath.Join(extDir, certstest.CAFile),
	}, "--kubeconfig="+kc))

	c := &cluster{cp: cp, admin: admin, kubeconfig: kc, listen: listen, stop: ext.stop}
	c.addNode(t, util.MakeNode("n1").Cards("Tesla-T4", 16, 8).Obj())
	c.createPod(t, util.MakePod("big").GPUMem(12).Obj())
	c.waitBound(t, []string{"big"}, 60*time.Second)
	c.createPod(t, util.MakePod("small").GPUMem(8).Obj())
	c.waitBound(t, []string{"small"}, 60*time.Second)
	if got := c.checkNoOvercommit(t); got != 2 {
		t.Errorf("checked %d pods, want 2", got)
	}

	// Without a client certificate the handshake fails; with the
	// scheduler's it is answered.
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	noCert := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	body := strings.NewReader(`{"Pod":null}`)
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: noCert}}
	if resp, err := plain.Post("https://"+listen+extender.Prefix+"/filter", "application/json", body); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate got %s; want the handshake refused", resp.Status)
	} else {
		t.Logf("without a client certificate: %v", err)
	}
	with := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig(t, ca, ca.Client(t, "probe"))}}
	resp, err := with.Post("https://"+listen+extender.Prefix+"/filter", "application/json", strings.NewReader(`{"Pod":null}`))
	if err != nil {
		t.Fatalf("a client with a certificate of the chart's CA: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("with a client certificate: %s, want 200", resp.Status)
	}
}
