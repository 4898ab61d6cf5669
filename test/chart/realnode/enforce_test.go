package realnode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/node"
	"github.com/gpushare/gpushare/test/node/probe"
)

// TestDriverModeThroughTheRuntime: driver mode's limits reach a container
// only through the CDI device the device plugin names for it, which the
// container runtime must apply (its edits set NVIDIA_GPU_MEMORY_LIMIT and
// run nvidia-cdi-hook apply-cuda-memory-limits). The cards' simulated
// driver is R615, and a stub nvidia-cdi-hook (test/images/cdihook) stands
// where the real one would be, recording every call.
//
// On a runtime that applies CDI devices (-realnode.runtime=containerd-2):
// both cards are published as driver; each GPU pod's container sees
// GPUSHARE_ISOLATION=driver and NVIDIA_GPU_MEMORY_LIMIT of its own share,
// and the runtime ran the hook once for each container, with that
// container's limit; a pod annotated gpushare.io/isolation: enforced runs.
//
// On one that ignores them (Debian's containerd 1.6, the default): no card
// is published as driver, the enforced pod is refused by the scheduler,
// not run unfenced, and a plain pod is told GPUSHARE_ISOLATION=none and
// gets no limit. (Before the device plugin read the runtime, the cards
// were published as driver here, and the enforced pod ran with
// GPUSHARE_ISOLATION=driver while the hook was never called.)
func TestDriverModeThroughTheRuntime(t *testing.T) {
	c := cluster(t)
	ctx := context.Background()
	appliesCDI := c.Node.Runtime() == node.Containerd2
	hook := filepath.Join(HookDir, "nvidia-cdi-hook")
	if err := installHook(c.Images.CDIHook, hook); err != nil {
		t.Fatal(err)
	}
	install(ctx, t, c, SecondScheduler, map[string]any{
		"devicePlugin": map[string]any{"fakeGPUs": FakeGPUs, "runtimeClassName": "", "fakeDriver": "615.00",
			"extraArgs": []any{"--cdi-hook=" + hook}},
	})
	n, err := c.Client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	runtime := n.Status.NodeInfo.ContainerRuntimeVersion
	t.Logf("the node's runtime: %s (applies CDI devices: %v)", runtime, appliesCDI)
	inv, err := c.waitInventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := gpushare.IsolationNone
	if appliesCDI {
		want = gpushare.IsolationDriver
	}
	for i := range inv.Devices {
		if d := &inv.Devices[i]; d.Mode() != want {
			t.Errorf("card %d is published with isolation %s on %s; want %s", d.Index, d.Mode(), runtime, want)
		}
	}

	const ns = "realnode-enforce"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(context.Background(), t, c, ns) })
	enforced := GPUPod(ns, "enforced", c.Images.Probe, 4)
	enforced.Annotations = map[string]string{gpushare.AnnotationIsolation: gpushare.IsolationEnforced}
	for _, p := range []*corev1.Pod{enforced, GPUPod(ns, "plain", c.Images.Probe, 8)} {
		if _, err := createPod(ctx, c, p); err != nil {
			t.Fatal(err)
		}
	}
	if !appliesCDI {
		rep := checkGPUPod(ctx, t, c, ns, "plain", string(gpushare.IsolationNone))
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
		if calls, err := hookCalls(hook); err != nil || len(calls) > 0 {
			t.Errorf("the hook ran %d times (%v); the runtime applies no CDI device", len(calls), err)
		}
		return
	}
	limits := map[string]string{} // pod -> the limit its container saw (MiB)
	for _, name := range []string{"enforced", "plain"} {
		rep := checkGPUPod(ctx, t, c, ns, name, string(gpushare.IsolationDriver))
		limits[name], _ = rep.Getenv(EnvMemoryLimit)
	}
	if limits["enforced"] != "4096" || limits["plain"] != "8192" {
		t.Errorf("the containers see %s %v; want enforced 4096, plain 8192 (MiB)", EnvMemoryLimit, limits)
	}
	calls, err := hookCalls(hook)
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string][]string{} // pod -> limits of the hook's calls for its probe container
	for _, call := range calls {
		t.Logf("nvidia-cdi-hook %v for %s/%s container %s: limit %s, request %s %s", call.Args[1:], call.Namespace, call.Pod, call.Container, call.Limit, call.Request, call.Err)
		if call.Namespace == ns && call.Container == ProbeContainer {
			ran[call.Pod] = append(ran[call.Pod], call.Limit)
		}
		if len(call.Args) < 2 || call.Args[1] != "apply-cuda-memory-limits" {
			t.Errorf("the hook was called with %v, want apply-cuda-memory-limits", call.Args)
		}
	}
	for pod, limit := range map[string]string{"enforced": "4096", "plain": "8192"} {
		if got := ran[pod]; len(got) != 1 || got[0] != limit {
			t.Errorf("the runtime ran the hook for %s/%s with limits %v; want once, with %s", ns, pod, got, limit)
		}
	}
}

// checkGPUPod waits for the pod's report, checks its card
// (CheckPlacement) and that its container is told isolation mode, and
// returns the report.
func checkGPUPod(ctx context.Context, t *testing.T, c *Cluster, ns, name, mode string) probe.Report {
	t.Helper()
	pod, rep, run, err := c.WaitReport(ctx, ns, name, 0, podTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := CheckPlacement(pod, rep, run); err != nil {
		t.Error(err)
	}
	if v, _ := rep.Getenv(EnvIsolation); v != mode {
		t.Errorf("pod %s/%s's container sees %s=%q, want %s", ns, name, EnvIsolation, v, mode)
	}
	return rep
}

// installHook copies the stub hook to path, fresh, with no calls recorded.
func installHook(src, path string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("reading the stub hook: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", filepath.Dir(path), err)
	}
	if err := os.Remove(filepath.Join(filepath.Dir(path), "calls.jsonl")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(path, b, 0o755); err != nil { //nolint:gosec // G306: an executable
		return fmt.Errorf("installing the stub hook: %w", err)
	}
	return nil
}

// hookCall is one line the stub hook records (test/images/cdihook).
type hookCall struct {
	Args                          []string
	ID, Namespace, Pod, Container string
	Limit, Request, Err           string
}

// hookCalls reads the calls the stub hook at path recorded.
func hookCalls(path string) ([]hookCall, error) {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(path), "calls.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []hookCall
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var c hookCall
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return out, fmt.Errorf("parsing the hook's record %q: %w", sc.Text(), err)
		}
		out = append(out, c)
	}
	return out, sc.Err()
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
// pod, and returns its message; an error when the pod is placed instead.
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
