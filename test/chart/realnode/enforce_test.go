package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// TestDriverModeNeedsACDIRuntime: the node's containerd 1.6 ignores the
// CDI devices that carry driver mode's per-container limits (kubelet
// passes them; nothing runs the NVIDIA hook). On cards whose (simulated)
// driver is R615 the device plugin must therefore not claim driver mode:
// both cards are published as none, a pod annotated
// gpushare.io/isolation: enforced is refused by the scheduler rather than
// run unfenced, and a plain GPU pod's container is told
// GPUSHARE_ISOLATION=none and gets no NVIDIA_GPU_MEMORY_LIMIT.
//
// Before the device plugin read the runtime (Node
// status.nodeInfo.containerRuntimeVersion, --runtime-cdi), the cards were
// published as driver, and the enforced pod ran with
// GPUSHARE_ISOLATION=driver while the stub hook the spec named was never
// called.
func TestDriverModeNeedsACDIRuntime(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	install(ctx, t, c, SecondScheduler, map[string]any{
		"devicePlugin": map[string]any{"fakeGPUs": FakeGPUs, "runtimeClassName": "", "fakeDriver": "615.00"},
	})
	node, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the node's runtime: %s", node.Status.NodeInfo.ContainerRuntimeVersion)
	inv, err := c.waitInventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range inv.Devices {
		if d := &inv.Devices[i]; d.Mode() != gpushare.IsolationNone {
			t.Errorf("card %d is published with isolation %s on %s, which applies no CDI devices; want none", d.Index, d.Mode(), node.Status.NodeInfo.ContainerRuntimeVersion)
		}
	}

	const ns = "realnode-enforce"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(context.Background(), t, c, ns) })
	enforced := GPUPod(ns, "enforced", c.Images.Probe, 4)
	enforced.Annotations = map[string]string{gpushare.AnnotationIsolation: gpushare.IsolationEnforced}
	if _, err := createPod(ctx, c, enforced); err != nil {
		t.Fatal(err)
	}
	if _, err := createPod(ctx, c, GPUPod(ns, "plain", c.Images.Probe, 4)); err != nil {
		t.Fatal(err)
	}
	pod, rep, run, err := c.WaitReport(ctx, ns, "plain", 0, podTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckPlacement(pod, rep, run); err != nil {
		t.Error(err)
	}
	if v, _ := rep.Getenv(EnvIsolation); v != string(gpushare.IsolationNone) {
		t.Errorf("the plain pod's container sees %s=%q, want none", EnvIsolation, v)
	}
	if v, ok := rep.Getenv(EnvMemoryLimit); ok {
		t.Errorf("the plain pod's container sees %s=%s: a limit no one applies", EnvMemoryLimit, v)
	}
	msg, err := c.waitUnschedulable(ctx, ns, "enforced")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "not enforced") {
		t.Errorf("the enforced pod is unschedulable for another reason: %s", msg)
	}
}

// waitInventory waits until the node carries the device plugin's
// inventory and returns it.
func (c *Cluster) waitInventory(ctx context.Context) (*gpushare.Inventory, error) {
	deadline := time.Now().Add(podTimeout)
	for {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err == nil {
			if s, ok := n.Annotations[gpushare.AnnotationInventory]; ok {
				return gpushare.ParseInventory(s)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("node %s has no %s %s after the install", NodeName, gpushare.AnnotationInventory, podTimeout)
		}
		time.Sleep(time.Second)
	}
}

// waitUnschedulable waits until the scheduler has found no node for the
// pod, and returns its message; an error when the pod runs instead.
func (c *Cluster) waitUnschedulable(ctx context.Context, ns, name string) (string, error) {
	deadline := time.Now().Add(podTimeout)
	for {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			if p.Spec.NodeName != "" {
				return "", fmt.Errorf("pod %s/%s was placed on %s (%s); want it refused", ns, name, p.Spec.NodeName, p.Annotations[gpushare.AnnotationAllocation])
			}
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
					return cond.Message, nil
				}
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("pod %s/%s neither placed nor refused after %s", ns, name, podTimeout)
		}
		time.Sleep(time.Second)
	}
}
