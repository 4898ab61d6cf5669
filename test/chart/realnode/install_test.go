package realnode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/memlimit"
)

// Timeouts of the install test; generous, for a loaded two-core machine.
const (
	installTimeout   = 5 * time.Minute
	podTimeout       = 3 * time.Minute
	uninstallTimeout = 3 * time.Minute
	goneTimeout      = 3 * time.Minute
	cardGiB          = 16 // FakeGPUs' card size
)

// TestHelmInstall installs the chart in each topology on the real node,
// with gpushare's images from `make images` and the device plugin on two
// simulated 16 GiB cards, and checks: every pod that the documented check
// (`kubectl -n kube-system get pods -l app.kubernetes.io/part-of=gpushare`)
// lists is Running and Ready (but the extender topology's followers, of
// which exactly one leader is Ready) and the check lists every pod of the
// release; three GPU pods asking 4, 8 and 12 GiB run on the card their
// annotation names, as the container itself sees it, and no card holds
// more than 16 GiB; the device plugin keeps its idle taint on the node
// while no GPU pod is there and takes it off when one is (the node-scope
// admission policy lets it); `helm uninstall` and the commands NOTES.txt
// lists after it leave nothing behind.
func TestHelmInstall(t *testing.T) {
	c := cluster(t)
	for _, topology := range []string{SecondScheduler, Extender} {
		t.Run(topology, func(t *testing.T) { testInstall(t, c, topology) })
	}
}

func testInstall(t *testing.T, c *Cluster, topology string) {
	ctx := context.Background()
	uninstall := install(ctx, t, c, topology, nil)
	checkSoftMemoryLimits(ctx, t, c, softLimitContainers...)
	waitIdleTaint(ctx, t, c, true)
	runGPUPods(ctx, t, c, "realnode-"+topology, []int64{4, 8, 12})
	waitIdleTaint(ctx, t, c, false)
	uninstall()
	var left []string
	deadline := time.Now().Add(goneTimeout)
	for {
		var err error
		if left, err = c.Leftovers(ctx); err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(left) > 0 {
		t.Errorf("helm uninstall left %d things behind after %s:\n  %s", len(left), goneTimeout, strings.Join(left, "\n  "))
	}
}

// softLimitContainers are the release's containers that set the Go
// runtime's soft memory limit from their cgroup's (pkg/memlimit).
var softLimitContainers = []string{"extender", "device-plugin"}

// checkSoftMemoryLimits checks, in the logs of the release's containers
// named names (each must run with a memory limit), that each took
// memlimit.DefaultFraction (90%) of its container's memory limit
// (resources.limits.memory) as the Go runtime's soft memory limit: what
// the runtime reads from the cgroup the container runtime made.
func checkSoftMemoryLimits(ctx context.Context, t *testing.T, c *Cluster, names ...string) {
	t.Helper()
	pods, err := c.ReleasePods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, p := range pods {
		for _, ctr := range p.Spec.Containers {
			limit, ok := ctr.Resources.Limits[corev1.ResourceMemory]
			if !ok || !slices.Contains(names, ctr.Name) {
				continue
			}
			want := fmt.Sprintf(`"Soft memory limit from the cgroup" limitBytes=%d softLimitBytes=%d `, limit.Value(), int64(float64(limit.Value())*memlimit.DefaultFraction))
			var text string
			for deadline := time.Now().Add(podTimeout); ; time.Sleep(time.Second) {
				text, _, err = c.Node.ContainerLog(p.Namespace, p.Name, string(p.UID), ctr.Name)
				if err == nil && strings.Contains(text, want) || time.Now().After(deadline) {
					break
				}
			}
			if !strings.Contains(text, want) {
				t.Errorf("container %s of pod %s (limit %s) did not log %s; its log (%v):\n%s", ctr.Name, p.Name, limit.String(), want, err, text)
			}
			checked++
		}
	}
	if checked < len(names) {
		t.Errorf("checked the soft memory limit of %d containers; the release runs at least %d with a memory limit (%v)", checked, len(names), names)
	}
}

// waitIdleTaint waits until the real node carries the device plugin's
// idle taint (gpushare.io/idle-gpus:PreferNoSchedule), or no longer does,
// as want says; it fails the test after podTimeout.
func waitIdleTaint(ctx context.Context, t *testing.T, c *Cluster, want bool) {
	t.Helper()
	var taints []corev1.Taint
	deadline := time.Now().Add(podTimeout)
	for {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading node %s: %v", NodeName, err)
		}
		taints = n.Spec.Taints
		has := slices.ContainsFunc(taints, func(tn corev1.Taint) bool {
			return tn.Key == gpushare.TaintIdleGPUs && tn.Effect == corev1.TaintEffectPreferNoSchedule
		})
		if has == want {
			return
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if want {
		t.Fatalf("node %s (%d cards, idleTaintMinCards %d, no GPU pod) has no %s taint after %s; its taints: %v (the device plugin's log says why)",
			NodeName, fakeGPUCount, fakeGPUCount, gpushare.TaintIdleGPUs, podTimeout, taints)
	}
	t.Fatalf("node %s still has the %s taint %s after its GPU pods started; its taints: %v", NodeName, gpushare.TaintIdleGPUs, podTimeout, taints)
}

// install installs the release in topology with extra values, checks its
// pods (checkReleasePods) and, in the extender topology, points the
// cluster's kube-scheduler at the extender as NOTES.txt tells the
// operator to. It returns the uninstall: `helm uninstall`, then the
// commands NOTES.txt lists after it (RunUninstallNotes); it fails the test
// on error. A cleanup uninstalls if the test has not.
func install(ctx context.Context, t *testing.T, c *Cluster, topology string, extra map[string]any) (uninstall func()) {
	t.Helper()
	installed := true
	notes := ""
	remove := func() error {
		installed = false
		if err := c.Uninstall(uninstallTimeout, t.Logf); err != nil {
			return err
		}
		return c.RunUninstallNotes(ctx, notes)
	}
	uninstall = func() {
		t.Helper()
		if installed {
			if err := remove(); err != nil {
				t.Fatal(err)
			}
		}
	}
	rel, err := c.Install(ctx, Values(topology, extra), installTimeout, t.Logf)
	if err != nil {
		t.Logf("release pods: %s", describeReleasePods(ctx, c))
		_ = c.Uninstall(uninstallTimeout, t.Logf)
		t.Fatal(err)
	}
	notes = rel.Info.Notes
	t.Cleanup(func() {
		if installed {
			if err := remove(); err != nil {
				t.Errorf("cleaning up: %v", err)
			}
		}
	})
	checkReleasePods(ctx, t, c, topology)
	if topology == Extender {
		// The operator's step: the cluster's kube-scheduler gets the
		// extenders stanza (NOTES.txt).
		if err := c.SchedulerForExtender(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := c.SchedulerWithoutExtender(context.Background()); err != nil {
				t.Errorf("putting kube-scheduler back: %v", err)
			}
		})
	}
	return uninstall
}

// checkReleasePods checks the documented pod listing against the
// release's workloads, and each pod's state.
func checkReleasePods(ctx context.Context, t *testing.T, c *Cluster, topology string) {
	t.Helper()
	want, err := c.releaseWorkloadPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	deadline := time.Now().Add(podTimeout)
	for {
		if pods, err = c.ReleasePods(ctx); err != nil {
			t.Fatal(err)
		}
		if len(pods) == want && len(notRunningOrReady(pods, topology)) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Second)
	}
	if len(pods) != want {
		t.Errorf("kubectl -n %s get pods -l %s lists %d pods; the release's Deployments and DaemonSets run %d (%s)",
			Namespace, PartOf, len(pods), want, describeReleasePods(ctx, c))
	}
	for _, p := range notRunningOrReady(pods, topology) {
		t.Errorf("pod %s: %s", p.Name, describePod(&p))
	}
}

// notRunningOrReady returns the pods that are not Running, or not Ready
// when they should be: in the extender topology exactly one extender, the
// leader, is Ready (the followers are not, by design).
func notRunningOrReady(pods []corev1.Pod, topology string) []corev1.Pod {
	var bad []corev1.Pod
	leaders := 0
	for _, p := range pods {
		follower := topology == Extender && p.Labels["app.kubernetes.io/name"] == "gpushare-scheduler-extender"
		switch {
		case p.Status.Phase != corev1.PodRunning:
			bad = append(bad, p)
		case follower && Ready(&p):
			leaders++
		case !follower && !Ready(&p):
			bad = append(bad, p)
		}
	}
	if topology == Extender && leaders != 1 {
		for _, p := range pods {
			if p.Labels["app.kubernetes.io/name"] == "gpushare-scheduler-extender" {
				bad = append(bad, p)
			}
		}
	}
	return bad
}

// releaseWorkloadPods is how many pods the release's Deployments and
// DaemonSets (by the instance label) want.
func (c *Cluster) releaseWorkloadPods(ctx context.Context) (int, error) {
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + ReleaseName}
	deps, err := c.Client.AppsV1().Deployments(Namespace).List(ctx, sel)
	if err != nil {
		return 0, fmt.Errorf("listing the release's Deployments: %w", err)
	}
	dss, err := c.Client.AppsV1().DaemonSets(Namespace).List(ctx, sel)
	if err != nil {
		return 0, fmt.Errorf("listing the release's DaemonSets: %w", err)
	}
	n := 0
	for _, d := range deps.Items {
		if d.Spec.Replicas != nil {
			n += int(*d.Spec.Replicas)
		}
	}
	for _, d := range dss.Items {
		n += int(d.Status.DesiredNumberScheduled)
	}
	return n, nil
}

// describeReleasePods lists every pod of the namespace that is the
// release's by name, with its labels and state, for a failure message.
func describeReleasePods(ctx context.Context, c *Cluster) string {
	l, err := c.Client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, p := range l.Items {
		if strings.HasPrefix(p.Name, "gpushare") {
			parts = append(parts, fmt.Sprintf("%s %v: %s", p.Name, p.Labels, describePod(&p)))
		}
	}
	return strings.Join(parts, "; ")
}

// runGPUPods creates a namespace with one GPU pod per size, checks each
// from inside its container, checks no card is over-committed, and
// deletes the namespace.
func runGPUPods(ctx context.Context, t *testing.T, c *Cluster, ns string, sizes []int64) []Placement {
	t.Helper()
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating namespace %s: %v", ns, err)
	}
	t.Cleanup(func() { deleteNamespace(context.Background(), t, c, ns) })
	for i, gib := range sizes {
		pod := GPUPod(ns, fmt.Sprintf("gpu-%d", i), c.Images.Probe, gib)
		if _, err := createPod(ctx, c, pod); err != nil {
			t.Fatalf("creating pod %s/%s: %v", ns, pod.Name, err)
		}
	}
	var ps []Placement
	for i := range sizes {
		name := fmt.Sprintf("gpu-%d", i)
		pod, rep, run, err := c.WaitReport(ctx, ns, name, 0, podTimeout)
		if err != nil {
			t.Fatal(err)
		}
		p, err := CheckPlacement(pod, rep, run)
		if err != nil {
			t.Error(err)
			continue
		}
		t.Logf("pod %s: %d GiB on card %d (%s), seen from inside", p.Pod, p.Units, p.Card, p.UUID)
		ps = append(ps, p)
	}
	for _, o := range Overcommitted(ps, cardGiB) {
		t.Error(o)
	}
	return ps
}

// createPod creates pod, retrying while the API refuses it for a moment
// (the webhook's Service has no ready endpoint yet after a restart).
func createPod(ctx context.Context, c *Cluster, pod *corev1.Pod) (*corev1.Pod, error) {
	var last error
	for range 30 {
		p, err := c.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) {
			return p, err
		}
		last = err
		time.Sleep(2 * time.Second)
	}
	return nil, last
}

// deleteNamespace deletes ns and waits until it is gone (its pods
// stopped).
func deleteNamespace(ctx context.Context, t *testing.T, c *Cluster, ns string) {
	if err := c.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting namespace %s: %v", ns, err)
		return
	}
	deadline := time.Now().Add(goneTimeout)
	for time.Now().Before(deadline) {
		if _, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		time.Sleep(time.Second)
	}
	t.Errorf("namespace %s still there %s after its deletion", ns, goneTimeout)
}
