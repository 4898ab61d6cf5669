package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// cluster is a control plane whose scheduler calls an in-process extender.
type cluster struct {
	cp         *framework.ControlPlane
	admin      kubernetes.Interface
	kubeconfig string // the extender's own identity (service account + manifests RBAC)
	listen     string // the extender's address
	// stop ends the running extender and waits for it.
	stop func()
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	listen := util.FreeAddr(t)
	cp := framework.StartT(t, framework.Options{ExtenderURL: "http://" + listen + extender.Prefix})
	ctx := context.Background()
	admin := cp.Client(framework.AdminUser)
	// The shipped admission policies too, enforced before the extender
	// binds anything: its Bindings must pass them.
	applyManifests(t, admin, "manifests/extender/rbac.yaml", annotationsPolicyFile, extenderStatusFile, nodeScopePolicyFile)
	waitAnnotationsPolicy(t, admin)
	kc, err := cp.ServiceAccountKubeconfig(ctx, "kube-system", "gpushare-scheduler-extender", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{cp: cp, admin: admin, kubeconfig: kc, listen: listen}
	c.startExtender(t)
	t.Cleanup(func() { c.stop() })
	return c
}

// runExtenderConfig builds the extender of cfg and serves it until ctx
// ends, as the command does.
func runExtenderConfig(ctx context.Context, cfg extender.Config) error {
	e, err := extender.New(ctx, cfg)
	if err != nil {
		return err
	}
	return e.Run(ctx)
}

// startExtender runs the extender in this process until c.stop, and waits
// until it is ready.
func (c *cluster) startExtender(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().WithName("extender")))
	done := make(chan error, 1)
	go func() {
		done <- runExtenderConfig(ctx, extender.Config{Kubeconfig: c.kubeconfig, Listen: c.listen, Policy: allocator.DefaultPolicy, QPS: 200, Burst: 400})
	}()
	var once sync.Once
	c.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("extender: %v", err)
			}
		})
	}
	waitExtenderReady(t, c.listen, done)
}

// addNode creates a node and sets its status as a kubelet and our device
// plugin would.
func (c *cluster) addNode(t *testing.T, n *corev1.Node) {
	t.Helper()
	if err := createNode(context.Background(), c.admin, n); err != nil {
		t.Fatal(err)
	}
}

// createNamespace creates namespace name.
func (c *cluster) createNamespace(t *testing.T, name string) {
	t.Helper()
	if _, err := c.admin.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createNode creates n with its status (framework.CreateNode).
func createNode(ctx context.Context, client kubernetes.Interface, n *corev1.Node) error {
	return framework.CreateNode(ctx, client, n)
}

func (c *cluster) createPod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	p.UID = ""
	p.Spec.SchedulerName = corev1.DefaultSchedulerName
	if _, err := c.admin.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitBound waits until every named pod has a node.
func (c *cluster) waitBound(t *testing.T, names []string, timeout time.Duration) {
	t.Helper()
	c.waitBoundIn(t, "default", names, timeout)
}

// waitBoundIn is waitBound for pods of namespace ns.
func (c *cluster) waitBoundIn(t *testing.T, ns string, names []string, timeout time.Duration) {
	t.Helper()
	var unbound []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := c.admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		bound := map[string]bool{}
		for _, p := range pods.Items {
			bound[p.Name] = p.Spec.NodeName != ""
		}
		unbound = unbound[:0]
		for _, n := range names {
			if !bound[n] {
				unbound = append(unbound, n)
			}
		}
		return len(unbound) == 0, nil
	})
	if err != nil {
		t.Fatalf("%d pods not bound after %v: %v (logs: %s)", len(unbound), timeout, unbound, c.cp.LogsDir())
	}
}

// checkNoOvercommit reads every pod and node from the API (not from the
// extender) and checks that each bound gpu-mem pod carries an allocation for
// its node whose cards exist and are healthy, and that no card holds more
// than its size. It returns the number of checked pods.
func (c *cluster) checkNoOvercommit(t *testing.T) int {
	t.Helper()
	ctx := context.Background()
	nodes, err := c.admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	size := map[string]map[int]int64{} // node -> healthy card index -> units
	for _, n := range nodes.Items {
		size[n.Name] = map[int]int64{}
		if inv, err := gpushare.ParseInventory(n.Annotations[gpushare.AnnotationInventory]); err == nil {
			for _, d := range inv.Devices {
				if d.Healthy {
					size[n.Name][d.Index] = d.Memory
				}
			}
		} else {
			mem := n.Status.Allocatable[gpushare.ResourceGPUMem]
			cnt := n.Status.Allocatable[gpushare.ResourceGPUCount]
			for i := range cnt.Value() {
				size[n.Name][int(i)] = mem.Value() / cnt.Value()
			}
		}
	}
	pods, err := c.admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]map[int]int64{}
	checked := 0
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" {
			continue
		}
		d, err := gpushare.PodDemand(&p)
		if err != nil {
			continue
		}
		a, err := gpushare.ParseAllocation(p.Annotations[gpushare.AnnotationAllocation])
		if err != nil {
			t.Errorf("pod %s bound to %s without a valid allocation: %v", p.Name, p.Spec.NodeName, err)
			continue
		}
		if a.Node != p.Spec.NodeName {
			t.Errorf("pod %s bound to %s but its allocation names %s", p.Name, p.Spec.NodeName, a.Node)
		}
		if a.Total() < d.Total() {
			t.Errorf("pod %s allocation holds %d units, it asks %d", p.Name, a.Total(), d.Total())
		}
		if p.Annotations[gpushare.AnnotationAssigned] != "false" || p.Annotations[gpushare.AnnotationPodMem] == "" {
			t.Errorf("pod %s lacks the Aliyun annotations: %v", p.Name, p.Annotations)
		}
		if used[a.Node] == nil {
			used[a.Node] = map[int]int64{}
		}
		for idx, u := range a.PerCard() {
			if _, ok := size[a.Node][idx]; !ok {
				t.Errorf("pod %s holds %d units on card %d of node %s, which is unhealthy or does not exist", p.Name, u, idx, a.Node)
			}
			used[a.Node][idx] += u
		}
		checked++
	}
	for node, cards := range used {
		for idx, u := range cards {
			if total, ok := size[node][idx]; ok && u > total {
				t.Errorf("node %s card %d holds %d units of %d", node, idx, u, total)
			}
		}
	}
	return checked
}

// TestSchedulingThroughRealScheduler drives pods through kube-scheduler
// and the extender: placements, annotations, no over-commit, reasons on an
// unschedulable pod; then restarts the extender while pods keep arriving.
func TestSchedulingThroughRealScheduler(t *testing.T) {
	c := startCluster(t)
	// Mixed cards, an unhealthy card, and a node without an inventory.
	c.addNode(t, util.MakeNode("t4").Cards("Tesla-T4", 16, 16, 16, 16).Obj())
	c.addNode(t, util.MakeNode("a100").Cards("A100-SXM4-80GB", 80, 80).Obj())
	c.addNode(t, util.MakeNode("mixed").Cards("mixed", 16, 32).Unhealthy(0).Obj())
	c.addNode(t, util.MakeNode("legacy").Capacity(64, 2).Obj())

	// The 100 GiB pod passes kube-scheduler's node-total check on a100
	// (160 GiB free) and is rejected by the extender with numbers.
	c.createPod(t, util.MakePod("too-big").GPUMem(100).Obj())
	var msg string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := c.admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=too-big"})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedScheduling" {
				msg = e.Message
				return strings.Contains(msg, "needs 100 GiB on one GPU; largest free GPU has 80 of 80 GiB"), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("no FailedScheduling event with the extender's reason for too-big; last message %q", msg)
	}

	// Capacity (healthy cards): 64 + 160 + 32 + 64 = 320 GiB. The pods
	// below ask about 250 GiB.
	r := rand.New(rand.NewSource(7))
	sizes := []int64{2, 4, 6, 8}
	var names []string
	add := func(p *corev1.Pod) {
		c.createPod(t, p)
		names = append(names, p.Name)
	}
	// The multi-card and multi-container pods go first: after the small
	// pods, whether two cards still have 32 GiB free depends on how the
	// policy packed them, and such a pod would rightly wait.
	add(util.MakePod("two-cards").GPUMemCards(64, 2).Obj())
	add(util.MakePod("duo").GPUMem(8).GPUMem(8).Obj())
	add(util.MakePod("with-init").InitGPUMem(12).GPUMem(4).Obj())
	for i := range 20 {
		add(util.MakePod(fmt.Sprintf("p%02d", i)).GPUMem(sizes[r.Intn(len(sizes))]).Obj())
	}
	c.waitBound(t, names, 60*time.Second)
	if got := c.checkNoOvercommit(t); got != len(names) {
		t.Errorf("checked %d bound pods, want %d", got, len(names))
	}

	// Restart the extender while pods keep arriving: 7 pods are created
	// just before it stops, 7 while it is down, and 6 after it is back. It
	// starts again only once kube-scheduler has tried, and failed, to
	// schedule a pod created while it was down, so the outage is known to
	// overlap scheduling.
	var more []string
	create := func(from, to int) {
		for i := from; i < to; i++ {
			p := util.MakePod(fmt.Sprintf("q%02d", i)).GPUMem(sizes[i%2]).Obj() // 2 or 4 GiB
			c.createPod(t, p)
			more = append(more, p.Name)
		}
	}
	create(0, 7)
	c.stop()
	create(7, 14)
	var tried string
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := c.admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if slices.Contains(more[7:], p.Name) && util.SchedulingFailed(&p) {
				tried = p.Name
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("kube-scheduler did not try any pod created while the extender was down (logs: %s)", c.cp.LogsDir())
	}
	t.Logf("extender down; kube-scheduler failed to schedule %s meanwhile", tried)
	c.startExtender(t)
	create(14, 20)
	c.waitBound(t, append(names, more...), 90*time.Second)
	if got := c.checkNoOvercommit(t); got != len(names)+len(more) {
		t.Errorf("after restart: checked %d bound pods, want %d", got, len(names)+len(more))
	}
}

// TestExtenderRBACIsEnough checks that the manifests' ClusterRole lets the
// extender do its job and nothing else: it cannot delete pods.
func TestExtenderRBACIsEnough(t *testing.T) {
	c := startCluster(t)
	client, err := extender.NewClient(c.kubeconfig, 10, 10)
	if err != nil {
		t.Fatal(err)
	}
	c.createPod(t, util.MakePod("victim").GPUMem(1).Obj())
	err = client.CoreV1().Pods("default").Delete(context.Background(), "victim", metav1.DeleteOptions{})
	if err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Errorf("extender identity deleting a pod: err = %v, want forbidden", err)
	}
}

// waitExtenderReady polls http://addr/readyz until the extender answers 200,
// failing the test if it exits (done) or is not ready within 30 s.
func waitExtenderReady(t *testing.T, addr string, done <-chan error) {
	t.Helper()
	waitExtenderAnswers(t, addr, "/readyz", done)
}

// waitExtenderAnswers polls http://addr+path until the extender answers
// 200 (e.g. /healthz of a replica that is not the leader, never ready). done
// must be buffered (its one error stays there for the extender's stop).
func waitExtenderAnswers(t *testing.T, addr, path string, done <-chan error) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		if len(done) > 0 {
			// Left in done for whoever stops the extender: it reads
			// the error there (taking it here left that reader
			// waiting forever).
			return false, errors.New("extender exited (its error follows, from its stop)")
		}
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("extender never answered %s with 200: %v", path, err)
	}
}
