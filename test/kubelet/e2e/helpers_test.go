package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/kubelet/cluster"
	"github.com/gpushare/gpushare/test/util"
)

// ns is one test's namespace in the shared cluster: it starts empty and
// its pods are deleted, and their memory seen freed, when the test ends.
type ns struct {
	t    *testing.T
	c    *cluster.Cluster
	name string
}

func newNS(t *testing.T, c *cluster.Cluster, name string) *ns {
	t.Helper()
	ctx := context.Background()
	if err := c.CP.CreateNamespace(ctx, name); err != nil {
		t.Fatal(err)
	}
	n := &ns{t: t, c: c, name: name}
	t.Cleanup(func() { n.deleteAll() })
	return n
}

// pod returns a pod of this namespace asking units on one card, pinned to
// node unless node is empty.
func (n *ns) pod(name string, units int64, node string) *corev1.Pod {
	p := util.MakePod(name).Namespace(n.name).GPUMem(units).Obj()
	if node != "" {
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": node}
	}
	return p
}

// create creates pods with 16 clients at once, as a burst.
func (n *ns) create(pods ...*corev1.Pod) {
	n.t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	work := make(chan *corev1.Pod)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				p = p.DeepCopy()
				p.UID = ""
				if _, err := n.c.Admin.CoreV1().Pods(n.name).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
					errs <- fmt.Errorf("creating pod %s: %w", p.Name, err)
				}
			}
		}()
	}
	for _, p := range pods {
		work <- p
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		n.t.Fatal(err)
	}
}

// list returns the namespace's pods, sorted by name.
func (n *ns) list() []corev1.Pod {
	n.t.Helper()
	l, err := n.c.Admin.CoreV1().Pods(n.name).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		n.t.Fatal(err)
	}
	sort.Slice(l.Items, func(i, j int) bool { return l.Items[i].Name < l.Items[j].Name })
	return l.Items
}

// waitAdmitted waits until the named pods (all of the namespace's when
// none are named) run with their environment recorded, and returns them.
// A pod that kubelet's device manager refused fails the test at once.
func (n *ns) waitAdmitted(timeout time.Duration, names ...string) []corev1.Pod {
	n.t.Helper()
	want := map[string]bool{}
	for _, name := range names {
		want[name] = true
	}
	var pods []corev1.Pod
	var pending []string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		pods, pending = nil, nil
		for _, p := range n.list() {
			if len(want) > 0 && !want[p.Name] {
				continue
			}
			if p.Status.Phase == corev1.PodFailed {
				return false, fmt.Errorf("pod %s/%s failed on %s: %s", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Message)
			}
			if !cluster.Admitted(&p) {
				pending = append(pending, p.Name)
			}
			pods = append(pods, p)
		}
		return len(pending) == 0 && (len(want) == 0 || len(pods) == len(want)), nil
	})
	if err != nil {
		n.t.Fatalf("%d pods not running after %s (%v): %v; logs in %s", len(pending), timeout, head(pending, 10), err, n.c.LogsDir())
	}
	return pods
}

// verify checks every container of pods (env == annotation, kubelet's
// devices == annotation's units) and every card of the cluster (not over
// its size, no device held twice). It returns the number of containers
// checked and of problems found (each also reported with t.Error).
func verify(t *testing.T, c *cluster.Cluster, pods []corev1.Pod) (containers, problems int) {
	t.Helper()
	for i := range pods {
		if p := &pods[i]; !aliyunIndexAgrees(p) {
			problems++
			t.Errorf("pod %s/%s: %s=%q does not name its first app container's card", p.Namespace, p.Name, gpushare.AnnotationIndex, p.Annotations[gpushare.AnnotationIndex])
		}
		rows, err := cluster.Rows(&pods[i])
		if err != nil {
			t.Error(err)
			problems++
			continue
		}
		for _, r := range rows {
			containers++
			if !r.Agrees() {
				problems++
				t.Errorf("pod %s/%s container %s on %s: %s", r.Namespace, r.Pod, r.Container, r.Node, r.Problem)
			}
		}
	}
	for _, b := range checkCards(t, c) {
		problems++
		t.Error(b)
	}
	return containers, problems
}

// aliyunIndexAgrees reports whether the Aliyun-compatible annotation
// ALIYUN_COM_GPU_MEM_IDX names the first app container's first card, as
// the contract (docs/design/contract.md) says.
func aliyunIndexAgrees(p *corev1.Pod) bool {
	a, err := gpushare.ParseAllocation(p.Annotations[gpushare.AnnotationAllocation])
	if err != nil {
		return false
	}
	for _, c := range a.Containers {
		if !c.Init && len(c.Devices) > 0 {
			return p.Annotations[gpushare.AnnotationIndex] == strconv.Itoa(c.Devices[0].Index)
		}
	}
	return false
}

// repairs counts the namespace's GPUAllocationRepaired events: pods whose
// annotation the device plugin rewrote because kubelet granted other cards
// than the extender chose. The environment must still match the (repaired)
// annotation; a repair only means the extender's choice was not kept.
func (n *ns) repairs() int {
	n.t.Helper()
	evs, err := n.c.Admin.CoreV1().Events(n.name).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=GPUAllocationRepaired"})
	if err != nil {
		n.t.Fatal(err)
	}
	return len(evs.Items)
}

// checkCards runs cluster.CheckCards over every node and pod of the cluster.
func checkCards(t *testing.T, c *cluster.Cluster) []string {
	t.Helper()
	ctx := context.Background()
	nodes, err := c.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.Admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cluster.CheckCards(nodes.Items, pods.Items)
}

// deleteAll deletes the namespace's pods as a user would (graceful), waits
// until the node agents have removed them, and until both the API's view
// (kubectl inspect gpushare) and the extender's (--from-extender) show
// nothing of the namespace held on any card.
func (n *ns) deleteAll() {
	n.t.Helper()
	ctx := context.Background()
	if err := n.c.Admin.CoreV1().Pods(n.name).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		n.t.Errorf("deleting the pods of %s: %v", n.name, err)
		return
	}
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return len(n.list()) == 0, nil
	})
	if err != nil {
		n.t.Errorf("pods of %s not removed after 60s: %d left", n.name, len(n.list()))
		return
	}
	for _, fromExtender := range []bool{false, true} {
		var held int64
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			held = n.held(inspect(n.t, n.c, fromExtender))
			return held == 0, nil
		})
		if err != nil {
			n.t.Errorf("after deleting every pod of %s, inspect (from extender: %v) still shows %d GiB held by them", n.name, fromExtender, held)
		}
	}
}

// held sums the units the namespace's pods hold in a report.
func (n *ns) held(r report) int64 {
	var sum int64
	for _, node := range r.Nodes {
		for _, card := range node.Cards {
			for _, p := range card.Pods {
				if p.Namespace == n.name {
					sum += p.Units
				}
			}
		}
	}
	return sum
}

// report is the part of `kubectl inspect gpushare -o json` (pkg/inspect.Report) the tests read.
type report struct {
	Nodes []struct {
		Name      string `json:"name"`
		Allocated int64  `json:"allocated"`
		Total     int64  `json:"total"`
		Cards     []struct {
			Index     int   `json:"index"`
			Allocated int64 `json:"allocated"`
			Total     int64 `json:"total"`
			Healthy   bool  `json:"healthy"`
			Pods      []struct {
				Namespace string `json:"namespace"`
				Name      string `json:"name"`
				Units     int64  `json:"units"`
			} `json:"pods"`
		} `json:"cards"`
	} `json:"nodes"`
}

// inspect runs our kubectl plugin with -o json against the API, or against
// the extender's GET /gpushare-scheduler/inspect.
func inspect(t *testing.T, c *cluster.Cluster, fromExtender bool) report {
	t.Helper()
	args := []string{"--kubeconfig", c.AdminKubeconfig(), "-o", "json"}
	if fromExtender {
		args = append(args, "--from-extender", c.ExtenderURL())
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command(c.Bins().Inspect, args...)
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl-inspect-gpushare %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	var r report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("decoding inspect -o json: %v", err)
	}
	return r
}

// allocation returns the pod's parsed gpushare.io/allocation.
func allocation(t *testing.T, p *corev1.Pod) *gpushare.Allocation {
	t.Helper()
	a, err := gpushare.ParseAllocation(p.Annotations[gpushare.AnnotationAllocation])
	if err != nil {
		t.Fatalf("pod %s: %v", p.Name, err)
	}
	return a
}

// waitNode polls node name until ok holds.
func waitNode(t *testing.T, c *cluster.Cluster, name string, timeout time.Duration, what string, ok func(*corev1.Node) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		n, err := c.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return ok(n), nil
	})
	if err != nil {
		t.Fatalf("node %s: %s: not after %s", name, what, timeout)
	}
}

func allocatable(n *corev1.Node) int64 {
	q := n.Status.Allocatable[gpushare.ResourceGPUMem]
	return q.Value()
}

// cardHealth returns the inventory's health per card index.
func cardHealth(n *corev1.Node) map[int]bool {
	inv, err := gpushare.ParseInventory(n.Annotations[gpushare.AnnotationInventory])
	if err != nil {
		return nil
	}
	out := map[int]bool{}
	for _, d := range inv.Devices {
		out[d.Index] = d.Healthy
	}
	return out
}

func head(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], "…")
	}
	return s
}
