package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/simulator"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
	"github.com/gpushare/gpushare/pkg/version"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// placementNodes is how many nodes of the openb slice the placement test
// replays: under 100, so kube-scheduler examines every node in each cycle.
const placementNodes = 40

// placementGate holds a pod back from kube-scheduler until the extender's
// informer has seen it (and the pods bound before it).
const placementGate = "gpushare.io/test-placement"

// TestSchedulerPlacesAsSimulated holds the simulator's model of the
// shipped configuration to the real kube-scheduler and extender: the first
// 40 nodes of the openb slice (pkg/simulator/testdata/openb-slice) and its
// pods, CPU-only ones included, in the simulator's order for seed 1 with
// clones up to 130% of the GPU memory, go one at a time through
// kube-scheduler with config/kube-scheduler-config.yaml and the extender
// with its default policy. Every pod must land on one of the nodes the
// simulator rates best (kube-scheduler breaks ties at random), or fail
// where the simulator finds no node, and a GPU pod must get the cards the
// simulator gives it there; the simulator then follows the real choice.
// Before each pod the nodes carry the gpushare.io/idle-gpus taint exactly
// where the simulator's model of the device plugin puts it
// (Stepper.IdleTainted), so kube-scheduler's TaintToleration weighs it as
// the simulator does.
func TestSchedulerPlacesAsSimulated(t *testing.T) {
	// The simulator scores as the control plane's kube-scheduler does
	// (1.36 changed NodeResourcesBalancedAllocation: Scheduler.BalanceGain).
	v, err := framework.DefaultKubernetesVersion()
	if err != nil {
		t.Fatal(err)
	}
	minor, err := version.KubernetesMinor(v)
	if err != nil {
		t.Fatal(err)
	}
	nodes, pods, tr := placementTrace(t)
	order, err := simulator.Arrivals(tr, 1, simulator.DefaultInflate)
	if err != nil {
		t.Fatal(err)
	}
	step, err := simulator.NewStepper(tr, simulator.Options{Policy: allocator.DefaultPolicy, Scheduler: simulator.ShippedScheduler.ForKubernetes(minor)})
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t)
	for _, n := range nodes {
		c.addNode(t, n)
	}
	waitExtenderNodes(t, c, len(nodes))

	ctx := context.Background()
	var placed, cpuPlaced, failed, ties, taintChanges int
	tainted := map[string]bool{} // node -> carries the idle taint
	for k, idx := range order {
		if syncIdleTaints(ctx, t, c.admin, step.IdleTainted(), tainted) {
			taintChanges++
			// kube-scheduler's node informer must see the change before
			// the pod's gate goes.
			time.Sleep(500 * time.Millisecond)
		}
		sp := &tr.Pods[idx]
		pod := pods[idx].DeepCopy()
		if k >= len(tr.Pods) {
			pod.Name = fmt.Sprintf("%s-c%d", pod.Name, k-len(tr.Pods))
		}
		choice := step.Choices(sp)
		if len(choice.Best) > 1 {
			ties++
		}
		got := schedulePod(ctx, t, c, pod)
		switch {
		case got.Spec.NodeName == "" && len(choice.Best) > 0:
			t.Fatalf("pod %d %s (%s) failed; the simulator places it on one of %v", k, pod.Name, sp.Kind, choice.Best)
		case got.Spec.NodeName != "" && !slices.Contains(choice.Best, got.Spec.NodeName):
			t.Fatalf("pod %d %s (%s) went to %s; the simulator rates best %v (the extender's: %v, prioritize %v)",
				k, pod.Name, sp.Kind, got.Spec.NodeName, choice.Best, choice.Extender, choice.Prio)
		}
		cards, err := step.Place(got.Spec.NodeName)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case got.Spec.NodeName == "":
			failed++
			if err := c.admin.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
				t.Fatal(err)
			}
		case sp.Demand == nil:
			cpuPlaced++
		default:
			placed++
			a, err := gpushare.ParseAllocation(got.Annotations[gpushare.AnnotationAllocation])
			if err != nil {
				t.Fatalf("pod %s: %v", pod.Name, err)
			}
			var real [][]int
			for _, ca := range a.Containers {
				var idx []int
				for _, d := range ca.Devices {
					idx = append(idx, d.Index)
				}
				real = append(real, idx)
			}
			if diff := cmp.Diff(cards, real); diff != "" {
				t.Fatalf("pod %d %s on %s: cards (-simulator +extender):\n%s", k, pod.Name, got.Spec.NodeName, diff)
			}
		}
	}
	t.Logf("%d pods: %d GPU pods and %d CPU-only pods placed as simulated, %d failed as simulated; %d had a choice of nodes; the idle taints changed %d times",
		len(order), placed, cpuPlaced, failed, ties, taintChanges)
	if placed == 0 || cpuPlaced == 0 || failed == 0 || ties == 0 || taintChanges < 2 {
		t.Errorf("the slice exercises too little: want GPU and CPU-only pods placed, pods failed, ties and idle taints that change")
	}
}

// syncIdleTaints gives exactly the nodes want the gpushare.io/idle-gpus
// taint (PreferNoSchedule), as the device plugin keeps it; tainted is what
// the nodes carry, kept up to date. It reports whether it changed a node.
func syncIdleTaints(ctx context.Context, t *testing.T, client kubernetes.Interface, want []string, tainted map[string]bool) bool {
	t.Helper()
	wanted, names := map[string]bool{}, map[string]bool{}
	for _, n := range want {
		wanted[n], names[n] = true, true
	}
	for n := range tainted {
		names[n] = true
	}
	changed := false
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if wanted[n] == tainted[n] {
			continue
		}
		node, err := client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Spec.Taints = slices.DeleteFunc(node.Spec.Taints, func(tt corev1.Taint) bool { return tt.Key == gpushare.TaintIdleGPUs })
		if wanted[n] {
			node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: gpushare.TaintIdleGPUs, Effect: corev1.TaintEffectPreferNoSchedule})
		}
		if _, err := client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		tainted[n], changed = wanted[n], true
	}
	return changed
}

// placementTrace returns the first placementNodes nodes of the openb slice
// and its pods as Kubernetes objects (a card of 1000 GiB for openb's 1000
// units; CPU and memory requested explicitly, as in the trace), and the
// simulator's trace read from those very objects.
func placementTrace(t *testing.T) ([]*corev1.Node, []*corev1.Pod, *trace.Trace) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	slice := filepath.Join(root, "pkg", "simulator", "testdata", "openb-slice")
	openb, err := trace.LoadTrace(filepath.Join(slice, "nodes.csv"), filepath.Join(slice, "pods.csv"))
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*corev1.Node
	for _, n := range openb.Nodes[:placementNodes] {
		sizes := make([]int64, len(n.Cards))
		for i := range sizes {
			sizes[i] = trace.OpenbMilli
		}
		node := util.MakeNode(n.Name).Cards(n.Model, sizes...).Host(fmt.Sprintf("%dm", n.MilliCPU), fmt.Sprintf("%dMi", n.MemoryMiB)).Obj()
		nodes = append(nodes, node)
	}
	var pods []*corev1.Pod
	for _, p := range openb.Pods {
		w := util.MakePod(p.Name)
		switch {
		case p.Demand == nil:
			w.Container("main")
		case p.Demand[0].Cards > 1:
			w.GPUMemCards(p.Demand[0].Total(), int64(p.Demand[0].Cards))
		default:
			w.GPUMem(p.Demand[0].Units)
		}
		pod := w.Requests(fmt.Sprintf("%dm", p.MilliCPU), fmt.Sprintf("%dMi", p.MemoryMiB)).Obj()
		pod.UID = ""
		pods = append(pods, pod)
	}
	tr, err := trace.TraceOf(nodes, pods)
	if err != nil {
		t.Fatal(err)
	}
	if len(tr.Pods) != len(pods) {
		t.Fatalf("the simulator read %d pods of %d", len(tr.Pods), len(pods))
	}
	// TraceOf keeps the objects' order; the names say it too.
	for i := range pods {
		if want := pods[i].Namespace + "/" + pods[i].Name; tr.Pods[i].Name != want {
			t.Fatalf("pod %d is %s in the simulator, %s here", i, tr.Pods[i].Name, want)
		}
	}
	return nodes, pods, tr
}

// waitExtenderNodes waits until the extender's inspect lists n nodes with
// their cards.
func waitExtenderNodes(t *testing.T, c *cluster, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + c.listen + extender.Prefix + "/inspect")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		var res extender.InspectResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			return false, nil
		}
		withCards := 0
		for _, v := range res.Nodes {
			if len(v.Cards) > 0 {
				withCards++
			}
		}
		return withCards == n, nil
	})
	if err != nil {
		t.Fatalf("waiting for the extender to see %d nodes: %v", n, err)
	}
}

// schedulePod creates pod held back by a scheduling gate, lets the
// extender's informer catch up, releases the pod to kube-scheduler and
// returns it once bound or found unschedulable.
func schedulePod(ctx context.Context, t *testing.T, c *cluster, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	pods := c.admin.CoreV1().Pods(pod.Namespace)
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: placementGate}}
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The extender learns a GPU pod's shape, and charges the CPU of the
	// pod bound before it, from its pod informer; kube-scheduler asks it
	// about the pod only once the gate is gone.
	time.Sleep(50 * time.Millisecond)
	created.Spec.SchedulingGates = nil
	if _, err := pods.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = p
		if p.Spec.NodeName != "" {
			return true, nil
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod %s neither bound nor unschedulable after 30 s: %v (logs: %s)", pod.Name, err, c.cp.LogsDir())
	}
	return got
}
