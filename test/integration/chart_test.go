package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/certs/certstest"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/leader"
	"github.com/gpushare/gpushare/pkg/version"
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
	return loadRenderedFor(t, framework.KubernetesVersion, file)
}

// loadRenderedFor is loadRendered for a cluster of Kubernetes version:
// the file of manifests/rendered/kubernetes-vMAJOR.MINOR/ where that
// version has its own rendering of it (test/chart VersionedPlain), else
// the file itself.
func loadRenderedFor(t *testing.T, kubeVersion, file string) renderedChart {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	minor, err := version.KubernetesMinor(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, "manifests", "rendered", file)
	if p := filepath.Join(root, "manifests", "rendered", fmt.Sprintf("kubernetes-v1.%d", minor), file); fileExists(p) {
		path = p
	}
	objs, err := framework.DecodeManifest(path)
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

// applyAccess creates the chart's service accounts, RBAC, Leases and
// admission policies as the admin, so the components run with exactly what
// the chart grants and under its policies. (Its service-account-token
// Secret is left out: no kube-controller-manager runs here to fill it; the
// tests give each process a token of the account the chart mounts,
// tokenAccount.)
func (r renderedChart) applyAccess(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	for _, obj := range r.objs {
		var err error
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = admin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *coordinationv1.Lease:
			_, err = admin.CoordinationV1().Leases(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
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

// tokenPath is where in-cluster clients read a pod's token, kube-scheduler
// (an empty clientConnection.kubeconfig) and the extender (no --kubeconfig)
// alike.
const tokenPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// tokenAccount is the service account (in systemNamespace) the named
// container of the named Deployment authenticates as: the pod's account
// where the container mounts a projected token of it at tokenPath or the
// pod automounts its token, the account of the service-account-token
// Secret the chart mounts there otherwise.
func (r renderedChart) tokenAccount(t *testing.T, deployment, container string) string {
	t.Helper()
	pod := r.deployment(t, deployment).Spec.Template.Spec
	c := r.container(t, deployment, container)
	for _, m := range c.VolumeMounts {
		if m.MountPath != tokenPath {
			continue
		}
		for _, v := range pod.Volumes {
			switch {
			case v.Name != m.Name:
			case v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(p corev1.VolumeProjection) bool { return p.ServiceAccountToken != nil }):
				return pod.ServiceAccountName
			case v.Secret != nil:
				for _, o := range r.objs {
					if s, ok := o.(*corev1.Secret); ok && s.Name == v.Secret.SecretName && s.Type == corev1.SecretTypeServiceAccountToken {
						return s.Annotations[corev1.ServiceAccountNameKey]
					}
				}
				t.Fatalf("container %s mounts Secret %s at %s: the chart renders no service-account-token Secret of that name", container, v.Secret.SecretName, tokenPath)
			}
		}
		t.Fatalf("container %s mounts volume %s at %s, neither a projected token nor a token Secret", container, m.Name, tokenPath)
	}
	if pod.AutomountServiceAccountToken != nil && !*pod.AutomountServiceAccountToken {
		t.Fatalf("container %s of Deployment %s has no service-account token", container, deployment)
	}
	return pod.ServiceAccountName
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
// deployment is the named Deployment.
func (r renderedChart) deployment(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	for _, o := range r.objs {
		if d, ok := o.(*appsv1.Deployment); ok && d.Name == name {
			return d
		}
	}
	t.Fatalf("the chart renders no Deployment %s", name)
	return nil
}

// replicas is the named Deployment's spec.replicas, at least 2: the tests
// that run them fail over.
func (r renderedChart) replicas(t *testing.T, deployment string) int {
	t.Helper()
	d := r.deployment(t, deployment)
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		t.Fatalf("Deployment %s renders replicas %v; want at least 2 (HA)", deployment, d.Spec.Replicas)
	}
	return int(*d.Spec.Replicas)
}

// startChartExtender parses args with the extender's own flag parser and
// runs it (runExtender: until the test ends, ready on --metrics-listen).
func startChartExtender(t *testing.T, args []string) *servingExtender {
	t.Helper()
	return runExtenderUntil(t, parseChartArgs(t, args), "/readyz")
}

// startChartReplica is startChartExtender for a replica that may not lead:
// it waits for /healthz only.
func startChartReplica(t *testing.T, args []string) *servingExtender {
	t.Helper()
	return runExtenderUntil(t, parseChartArgs(t, args), "/healthz")
}

func parseChartArgs(t *testing.T, args []string) extender.Config {
	t.Helper()
	var usage bytes.Buffer
	cfg, _, err := extender.ParseFlags(args, &usage)
	if err != nil {
		t.Fatalf("the chart's extender arguments %v: %v\n%s", args, err, usage.String())
	}
	return cfg
}

// kubeconfigVia writes a copy of the kubeconfig at path whose server is
// server, and returns its path.
func kubeconfigVia(t *testing.T, path, server string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// leaseHolder is the holder of the Lease kube-system/name, "" when none.
func leaseHolder(ctx context.Context, admin kubernetes.Interface, name string) string {
	l, err := admin.CoordinationV1().Leases(systemNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// waitLeader waits until the holder of the Lease kube-system/name is one
// of identities (per leader.Ours: "id" or "id_<uuid>") and returns its
// index.
func waitLeader(t *testing.T, admin kubernetes.Interface, name string, identities []string, timeout time.Duration) int {
	t.Helper()
	idx, holder := -1, ""
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		holder = leaseHolder(ctx, admin, name)
		idx = slices.IndexFunc(identities, func(id string) bool { return holder != "" && leader.Ours(holder, id) })
		return idx >= 0, nil
	}); err != nil {
		t.Fatalf("the lease kube-system/%s is held by %q, none of %v: %v", name, holder, identities, err)
	}
	return idx
}

// leaderGauge is gpushare_extender_leader of the extender whose metrics
// listener is addr.
func leaderGauge(t *testing.T, addr string) float64 {
	t.Helper()
	v, ok := metricValue(scrapeMetrics(t, "http://"+addr+"/metrics"), "gpushare_extender_leader", map[string]string{})
	if !ok {
		t.Fatalf("the extender on %s exports no gpushare_extender_leader", addr)
	}
	return v
}

// waitGauges waits until gpushare_extender_leader of each metrics address
// is the wanted value.
func waitGauges(t *testing.T, want map[string]float64) {
	t.Helper()
	got := map[string]float64{}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for addr := range want {
			got[addr] = leaderGauge(t, addr)
		}
		return maps.Equal(want, got), nil
	}); err != nil {
		t.Fatalf("gpushare_extender_leader by metrics address: %v, want %v", got, want)
	}
}

// allocationOf returns the allocation annotation of pod default/name.
func allocationOf(t *testing.T, admin kubernetes.Interface, name string) *gpushare.Allocation {
	t.Helper()
	p, err := admin.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := gpushare.ParseAllocation(p.Annotations[gpushare.AnnotationAllocation])
	if err != nil {
		t.Fatalf("pod %s: %v", name, err)
	}
	return a
}

// wantCard checks that pod default/name holds units on card only.
func wantCard(t *testing.T, admin kubernetes.Interface, name string, card int) {
	t.Helper()
	a := allocationOf(t, admin, name)
	if got := a.PerCard(); len(got) != 1 || got[card] == 0 {
		t.Errorf("pod %s holds %v (card -> units); want only card %d", name, got, card)
	}
}

// schedulerPod is one pod of the chart's scheduler Deployment: its host
// name (the pod name), kube-scheduler and the extender sidecar.
type schedulerPod struct {
	host                  string
	listen, metrics, hook string // the sidecar's addresses
	sidecar               *servingExtender
	scheduler             *framework.Proc
	schedAddr             string // kube-scheduler's secure port
}

// TestChartSecondScheduler runs the second-scheduler topology from
// manifests/rendered/second-scheduler.yaml: each of the Deployment's
// replicas as a pod would run it, the real kube-scheduler with the chart's
// KubeSchedulerConfiguration (leader election on the chart's lease) and
// container flags, under the pod's host name (a UTS namespace of its own),
// and the extender with the sidecar's flags, following that lease; each as
// the service account whose token the chart mounts in its container
// (tokenAccount: kube-scheduler's own, the extender's), with only the
// chart's RBAC and Leases, under the chart's admission policies and
// MutatingWebhookConfiguration. Rewritten for the harness: the
// kubeconfigs (a token of that account, where the pod reads a mounted
// one), listen addresses and ports, the files'
// directories, the webhook's clientConfig (the test apiserver reaches no
// Service), and the sidecar's identity: --leader-elect-identity=<host
// name>, what its default (the host name) reads in the pod, since the
// sidecars run in this process. Pods reach the leading scheduler by
// spec.schedulerName and through the webhook, and land on the cards only
// they fit; only the leader's sidecar serves. Then the leading
// kube-scheduler is killed: the other takes the lease, its sidecar takes
// over (the old one stops serving), and a pod still gets the one card it
// fits.
func TestChartSecondScheduler(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	cp := framework.StartT(t, framework.Options{})
	chart := loadRenderedFor(t, cp.Version(), "second-scheduler.yaml")
	admin := cp.Client(framework.AdminUser)
	chart.applyAccess(t, admin)
	waitAnnotationsPolicy(t, admin)
	kc, err := cp.ServiceAccountKubeconfig(ctx, systemNamespace, chart.tokenAccount(t, "gpushare-scheduler", "extender"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	schedKC, err := cp.ServiceAccountKubeconfig(ctx, systemNamespace, chart.tokenAccount(t, "gpushare-scheduler", "kube-scheduler"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	sidecar := chart.container(t, "gpushare-scheduler", "extender")
	if slices.ContainsFunc(sidecar.Env, func(e corev1.EnvVar) bool { return e.Name == "POD_NAME" }) {
		t.Fatal("the sidecar sets POD_NAME: its identity would not be the host name kube-scheduler's is made of")
	}
	sched := chart.container(t, "gpushare-scheduler", "kube-scheduler")
	if len(sched.Command) != 1 || sched.Command[0] != "kube-scheduler" {
		t.Fatalf("the chart runs %v, want kube-scheduler", sched.Command)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(chart.configMapData(t, "gpushare-scheduler-config", "kube-scheduler-config.yaml")), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["clientConnection"].(map[string]any)["kubeconfig"] = schedKC
	if url := cfg["extenders"].([]any)[0].(map[string]any)["urlPrefix"].(string); !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("the chart's extender urlPrefix %s is not on the pod's loopback", url)
	}

	// The sidecars' webhook files, where the Secret would be.
	ca := certstest.NewCA(t, "webhook-ca")
	tlsDir := t.TempDir()
	certstest.WriteSecretVolume(t, tlsDir, certstest.SecretFiles(ca, ca.Server(t)))
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health check of a self-signed scheduler
	pods := make([]*schedulerPod, chart.replicas(t, "gpushare-scheduler"))
	hosts := make([]string, len(pods))
	for i := range pods {
		p := &schedulerPod{host: fmt.Sprintf("gpushare-scheduler-%c", 'a'+i), listen: util.FreeAddr(t), metrics: util.FreeAddr(t), hook: util.FreeAddr(t), schedAddr: util.FreeAddr(t)}
		pods[i], hosts[i] = p, p.host
		p.sidecar = startChartExtender(t, rewriteArgs(t, sidecar.Args, map[string]string{
			"--listen": p.listen, "--metrics-listen": p.metrics, "--webhook-listen": p.hook,
			"--webhook-tls-cert-file": filepath.Join(tlsDir, certstest.CertFile),
			"--webhook-tls-key-file":  filepath.Join(tlsDir, certstest.KeyFile),
		}, "--kubeconfig="+kc, "--leader-elect-identity="+p.host))

		// kube-scheduler with the chart's configuration and flags, calling
		// its own sidecar.
		for _, e := range cfg["extenders"].([]any) {
			e.(map[string]any)["urlPrefix"] = "http://" + p.listen + extender.Prefix
		}
		data, err := yaml.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfgPath := filepath.Join(t.TempDir(), "kube-scheduler-config.yaml")
		if err := os.WriteFile(cfgPath, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, port, _ := strings.Cut(p.schedAddr, ":")
		args := rewriteArgs(t, sched.Args, map[string]string{"--config": cfgPath, "--secure-port": port}, "--bind-address=127.0.0.1")
		logPath := filepath.Join(cp.LogsDir(), "chart-"+p.host+".log")
		if p.scheduler, err = framework.StartProcWithHostname("kube-scheduler", p.host, cp.SchedulerBinary(), args, logPath); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.scheduler.Stop(10 * time.Second) })
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			resp, err := insecure.Get("https://" + p.schedAddr + "/readyz")
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		}); err != nil {
			t.Fatalf("kube-scheduler %s never ready: %v\n%s", p.host, err, framework.Tail(logPath, 30))
		}
	}
	// One scheduler holds the chart's lease, and only its sidecar serves.
	lead := waitLeader(t, admin, "gpushare-scheduler", hosts, 60*time.Second)
	other := pods[(lead+1)%len(pods)]
	gauges := map[string]float64{}
	for i, p := range pods {
		gauges[p.metrics] = map[bool]float64{true: 1, false: 0}[i == lead]
	}
	waitGauges(t, gauges)

	// The chart's webhook, pointed at a sidecar (every sidecar serves it).
	var mwc *admissionregistrationv1.MutatingWebhookConfiguration
	for _, o := range chart.objs {
		if m, ok := o.(*admissionregistrationv1.MutatingWebhookConfiguration); ok {
			mwc = m
		}
	}
	if mwc == nil {
		t.Fatal("the chart renders no MutatingWebhookConfiguration")
	}
	hookURL := "https://" + other.hook + "/mutate-pods"
	if got := *mwc.Webhooks[0].ClientConfig.Service.Path; got != "/mutate-pods" {
		t.Fatalf("the chart's webhook path is %s", got)
	}
	mwc.Webhooks[0].ClientConfig = admissionregistrationv1.WebhookClientConfig{URL: &hookURL, CABundle: ca.PEM}
	if _, err := admin.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	c := &cluster{cp: cp, admin: admin, kubeconfig: kc}
	createNamed := func(name string, gib int64) {
		t.Helper()
		p := util.MakePod(name).GPUMem(gib).Obj()
		p.UID = ""
		p.Spec.SchedulerName = "gpushare-scheduler"
		if _, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Cards of 16 and 8 GiB: 12 GiB fits card 0 only; then 8 GiB fits
	// card 1 only (card 0 has 4 left).
	c.addNode(t, util.MakeNode("n1").Cards("Tesla-T4", 16, 8).Obj())
	createNamed("by-name", 12)
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
		t.Fatalf("the webhook never routed a GPU pod: %v (extender log:\n%s)", err, other.sidecar.logs.String())
	}
	c.waitBound(t, []string{"by-webhook"}, 60*time.Second)
	wantCard(t, admin, "by-name", 0)
	wantCard(t, admin, "by-webhook", 1)

	// The leading kube-scheduler crashes (its sidecar lives on, as in a pod
	// whose scheduler container died). The other takes the lease after its
	// duration; the old sidecar stops serving and answers the verbs 503,
	// the new one serves after its catch-up.
	pods[lead].scheduler.Kill()
	waitLeader(t, admin, "gpushare-scheduler", []string{other.host}, 60*time.Second)
	waitGauges(t, map[string]float64{pods[lead].metrics: 0, other.metrics: 1})
	resp, err := http.Post("http://"+pods[lead].listen+extender.Prefix+"/filter", "application/json",
		strings.NewReader(`{"Pod":{"metadata":{"name":"x","namespace":"default"}},"NodeNames":["n1"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the old leader's sidecar answers filter %s; want 503 (its scheduler lost the lease)", resp.Status)
	}
	// 4 GiB fits card 0 only (card 1 is full): the new sidecar knows
	// both pods the old one placed.
	createNamed("after-failover", 4)
	c.waitBound(t, []string{"after-failover"}, 60*time.Second)
	wantCard(t, admin, "after-failover", 0)
	if got := c.checkNoOvercommit(t); got != 3 {
		t.Errorf("checked %d pods, want 3", got)
	}

	// Preemption per card in this topology (issue 25), through the chart's
	// scheduler configuration (its preemptVerb) and its RBAC (the sidecar
	// evicts and nominates): two 16 GiB cards each hold a 9 GiB
	// low-priority pod; a 14 GiB high-priority pod fits the node's total
	// but no card. Exactly one card's pod goes, and the pod lands there.
	for name, value := range map[string]int32{classLow: 10, classHigh: 1000} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := admin.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c.addNode(t, util.MakeNode("p1").Cards("Tesla-T4", 16, 16).Label(scenarioLabel, "chart").Obj())
	createPrio := func(name, class string, gib int64) {
		t.Helper()
		p := util.MakePod(name).GPUMem(gib).PriorityClass(class).NodeSelector(scenarioLabel, "chart").Obj()
		p.UID, p.Spec.SchedulerName = "", "gpushare-scheduler"
		if _, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"low-a", "low-b"} {
		createPrio(name, classLow, 9)
		c.waitBound(t, []string{name}, 60*time.Second)
	}
	createPrio("high", classHigh, 14)
	victims := c.waitTerminating(t, 1, "low-a", "low-b")
	if nominated := c.waitNominated(t, "high"); nominated != "p1" {
		t.Errorf("high nominated to %q, want p1", nominated)
	}
	victimCard := cardOf(t, c, victims[0])
	c.finishTerminating(t, victims...)
	c.waitBound(t, []string{"high"}, 60*time.Second)
	if got := cardOf(t, c, "high"); got != victimCard {
		t.Errorf("high landed on card %d; its victim %s held card %d", got, victims[0], victimCard)
	}
	c.expectUntouched(t, except([]string{"low-a", "low-b"}, victims)...)
	c.checkNoOvercommit(t)

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

// tcpProxy forwards each connection to the address pick gives at accept
// time ("" refuses it); TLS passes through. It stands in for a Service and
// kube-proxy (pick: a ready backend, readyBackend), and for a pod's network
// to the API server, which cut severs.
type tcpProxy struct {
	pick  func() string
	mu    sync.Mutex
	conns map[net.Conn]bool // open connections, either side
	cut   bool              // closed, or cut off: close connections at once
}

func startTCPProxy(t *testing.T, addr string, pick func() string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{pick: pick, conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		p.sever()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); p.forward(conn) }()
		}
	}()
	return p
}

// sever closes every connection and refuses new ones.
func (p *tcpProxy) sever() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// proxyBackend is one pod behind a Service: its serving address and the
// plain listener its readiness probe reads.
type proxyBackend struct {
	listen, metrics string
}

// readyBackend picks, for each new connection, the first backend whose
// /readyz answers 200 now: a Service's endpoints are its ready pods.
func readyBackend(backends []proxyBackend) func() string {
	probe := &http.Client{Timeout: time.Second}
	return func() string {
		for _, b := range backends {
			resp, err := probe.Get("http://" + b.metrics + "/readyz")
			if err != nil {
				continue
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return b.listen
			}
		}
		return ""
	}
}

// track records c as open until the returned func; on a severed proxy it
// closes c at once.
func (p *tcpProxy) track(c net.Conn) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		_ = c.Close()
	}
	p.conns[c] = true
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.conns, c)
		_ = c.Close()
	}
}

func (p *tcpProxy) forward(client net.Conn) {
	defer p.track(client)()
	to := p.pick()
	if to == "" {
		return
	}
	backend, err := net.DialTimeout("tcp", to, 5*time.Second)
	if err != nil {
		return
	}
	defer p.track(backend)()
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// The other direction ends too: a closed backend (a stopped
		// replica) closes the client's connection.
		_ = dst.Close()
		_ = src.Close()
		done <- struct{}{}
	}
	go pipe(backend, client)
	go pipe(client, backend)
	<-done
	<-done
}

// TestChartExtenderOverHTTPS runs the extender topology from
// manifests/rendered/extender.yaml: the Deployment's replicas with its
// flags (HTTPS, client CA, metrics listener, leader election) and its
// POD_NAME, as the service account of its pod, behind a stand-in for its
// Service that routes to the ready pods (tcpProxy), and the real
// kube-scheduler with the KubeSchedulerConfiguration of the chart's
// ConfigMap, the stanza NOTES.txt prints (test/chart checks they are
// equal), with a client certificate of the CA that signed the extender's,
// as the chart's Secrets hold them. Rewritten: the URL (the stand-in's
// address), the tlsConfig files' directory, listen addresses. One replica
// leads and alone is ready; pods land on the cards only they fit. The
// leader is cut off from the API server, as by its node's death: the
// other takes the lease once it expires and alone is ready, and a pod
// still gets the one card it fits. A client without a certificate is
// refused.
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
	svc := util.FreeAddr(t)
	cp := framework.StartT(t, framework.Options{
		ExtenderURL:     "https://" + svc + extender.Prefix,
		SchedulerConfig: cfgPath,
		ExtenderTLS: &framework.ExtenderTLS{CertFile: filepath.Join(schedDir, certstest.CertFile),
			KeyFile: filepath.Join(schedDir, certstest.KeyFile), CAFile: filepath.Join(schedDir, certstest.CAFile)},
	})
	admin := cp.Client(framework.AdminUser)
	chart.applyAccess(t, admin)
	kc, err := cp.ServiceAccountKubeconfig(ctx, systemNamespace, chart.tokenAccount(t, "gpushare-scheduler-extender", "extender"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	main := chart.container(t, "gpushare-scheduler-extender", "extender")
	wantEnv := []corev1.EnvVar{{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	if diff := cmp.Diff(wantEnv, main.Env); diff != "" {
		t.Fatalf("the extender's env (-want +chart): the identity in the lease is the pod name\n%s", diff)
	}
	n := chart.replicas(t, "gpushare-scheduler-extender")
	names := make([]string, n)
	backends := make([]proxyBackend, n)
	links := make([]*tcpProxy, n) // each replica's network to the API server
	apiserver := strings.TrimPrefix(cp.APIServerURL(), "https://")
	for i := range n {
		names[i] = fmt.Sprintf("gpushare-scheduler-extender-%c", 'a'+i)
		backends[i] = proxyBackend{listen: util.FreeAddr(t), metrics: util.FreeAddr(t)}
		link := util.FreeAddr(t)
		links[i] = startTCPProxy(t, link, func() string { return apiserver })
		// What the downward API gives each pod; the flag's default reads it.
		t.Setenv("POD_NAME", names[i])
		startChartReplica(t, rewriteArgs(t, main.Args, map[string]string{
			"--listen": backends[i].listen, "--metrics-listen": backends[i].metrics,
			"--tls-cert-file":  filepath.Join(extDir, certstest.CertFile),
			"--tls-key-file":   filepath.Join(extDir, certstest.KeyFile),
			"--client-ca-file": filepath.Join(extDir, certstest.CAFile),
		}, "--kubeconfig="+kubeconfigVia(t, kc, "https://"+link)))
	}
	startTCPProxy(t, svc, readyBackend(backends))
	readyOnly := func(want int) {
		t.Helper()
		got := []int{}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			got = got[:0]
			for i, b := range backends {
				if resp, err := http.Get("http://" + b.metrics + "/readyz"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						got = append(got, i)
					}
				}
			}
			return slices.Equal(got, []int{want}), nil
		}); err != nil {
			t.Fatalf("ready replicas %v; want only %d", got, want)
		}
	}
	lead := waitLeader(t, admin, "gpushare-scheduler-extender", names, 60*time.Second)
	readyOnly(lead)
	next := (lead + 1) % n

	c := &cluster{cp: cp, admin: admin, kubeconfig: kc, listen: svc}
	c.addNode(t, util.MakeNode("n1").Cards("Tesla-T4", 16, 8).Obj())
	c.createPod(t, util.MakePod("big").GPUMem(12).Obj())
	c.waitBound(t, []string{"big"}, 60*time.Second)
	c.createPod(t, util.MakePod("small").GPUMem(8).Obj())
	c.waitBound(t, []string{"small"}, 60*time.Second)
	wantCard(t, admin, "big", 0)
	wantCard(t, admin, "small", 1)

	// The leader is cut off from the API server (its node died, or a
	// partition): it can neither renew nor release the lease, and stops
	// serving at its renew deadline; the other takes the lease once it has
	// seen no renewal for the lease duration.
	links[lead].sever()
	waitLeader(t, admin, "gpushare-scheduler-extender", names[next:next+1], 60*time.Second)
	readyOnly(next)
	// 4 GiB fits card 0 only: the new leader knows both pods.
	c.createPod(t, util.MakePod("after-failover").GPUMem(4).Obj())
	c.waitBound(t, []string{"after-failover"}, 60*time.Second)
	wantCard(t, admin, "after-failover", 0)
	if got := c.checkNoOvercommit(t); got != 3 {
		t.Errorf("checked %d pods, want 3", got)
	}

	// Without a client certificate the handshake fails; with the
	// scheduler's it is answered.
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	noCert := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	body := strings.NewReader(`{"Pod":null}`)
	plain := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: noCert}}
	if resp, err := plain.Post("https://"+svc+extender.Prefix+"/filter", "application/json", body); err == nil {
		resp.Body.Close()
		t.Errorf("a client without a certificate got %s; want the handshake refused", resp.Status)
	} else {
		t.Logf("without a client certificate: %v", err)
	}
	with := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig(t, ca, ca.Client(t, "probe"))}}
	resp, err := with.Post("https://"+svc+extender.Prefix+"/filter", "application/json", strings.NewReader(`{"Pod":null}`))
	if err != nil {
		t.Fatalf("a client with a certificate of the chart's CA: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("with a client certificate: %s, want 200", resp.Status)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
