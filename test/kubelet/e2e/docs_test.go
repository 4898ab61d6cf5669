package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/docs"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/kubelet/cluster"
	"github.com/gpushare/gpushare/test/kubelet/nodeagent"
)

// verifyPod is the quick start's pod (README.md), and the share it asks.
const (
	verifyPod       = "gpushare-verify"
	verifyLimitMiB  = "4096"
	blockTimeout    = 3 * time.Minute
	docsExampleNode = docs.ExampleNode
)

// TestDocsCommands runs every shell block the docs mark "cluster" (see
// package test/docs), as written, with bash, in the order a reader meets
// them (README, install, user guide, … uninstall last), against this
// package's cluster: kubectl v1.34.3 (built from the pinned module like the
// control plane) and kubectl-inspect-gpushare on PATH, KUBECONFIG the
// admin's, the repository root as working directory, and the docs'
// example node replaced by t4-1. Each block must exit 0 and match its
// marker's expect. Right after the quick start's verify pod is Ready, the
// environment kubelet's device manager gave it is checked against its
// allocation (what `kubectl logs` would print on a real node, which the
// docs mark as not run here). The cluster is put back as the other tests
// need it: the verify pod gone, t4-1's plugin restarted so its inventory
// is published again.
func TestDocsCommands(t *testing.T) {
	c := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docs.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	kubectl, err := framework.EnsureKubectl(ctx)
	if err != nil {
		t.Fatalf("building kubectl: %v", err)
	}
	bin := t.TempDir()
	for name, target := range map[string]string{"kubectl": kubectl, "kubectl-inspect-gpushare": c.Bins().Inspect} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	node := c.Nodes()[0].Spec.Name // t4-1
	env := append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+c.AdminKubeconfig(),
		"HOME="+t.TempDir(), // kubectl's cache, not the user's
	)
	t.Cleanup(func() { restoreDocsNode(t, c, node) })

	ran := 0
	for _, b := range blocks {
		if b.Mode != docs.ModeCluster {
			continue
		}
		ran++
		script := strings.ReplaceAll(b.Text, docsExampleNode, node)
		bctx, bcancel := context.WithTimeout(ctx, blockTimeout)
		cmd := exec.CommandContext(bctx, "bash", "-euo", "pipefail", "-c", script)
		cmd.Dir, cmd.Env = root, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		bcancel()
		if err != nil {
			t.Errorf("%s: %v\n--- block (%s replaced by %s)\n%s--- output\n%s", b, err, docsExampleNode, node, script, out.String())
			continue
		}
		if b.Expect != nil && !b.Expect.Match(out.Bytes()) {
			t.Errorf("%s: the output does not match %q\n--- block\n%s--- output\n%s", b, b.Expect, script, out.String())
			continue
		}
		t.Logf("%s: ok (%d bytes of output)", b, out.Len())
		if strings.Contains(script, "pod/"+verifyPod) {
			checkVerifyPod(ctx, t, c)
		}
	}
	if ran < 10 {
		t.Errorf("ran %d cluster blocks; the markers or the parser are broken", ran)
	}
}

// checkVerifyPod checks what the quick start's pod got: one card of its
// allocation in NVIDIA_VISIBLE_DEVICES and its 4 GiB in
// GPUSHARE_MEMORY_LIMIT_MIB, as the container's environment (recorded by
// the node agent) holds them.
func checkVerifyPod(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	p, err := c.Admin.CoreV1().Pods("default").Get(ctx, verifyPod, metav1.GetOptions{})
	if err != nil {
		t.Errorf("the quick start's pod: %v", err)
		return
	}
	var alloc gpushare.Allocation
	if err := json.Unmarshal([]byte(p.Annotations[gpushare.AnnotationAllocation]), &alloc); err != nil || len(alloc.Containers) != 1 || len(alloc.Containers[0].Devices) != 1 {
		t.Errorf("pod %s: allocation %q (%v): want one container on one card", verifyPod, p.Annotations[gpushare.AnnotationAllocation], err)
		return
	}
	var envs map[string]map[string]string // container -> variable -> value
	if err := json.Unmarshal([]byte(p.Annotations[nodeagent.AnnotationEnv]), &envs); err != nil {
		t.Errorf("pod %s: no environment recorded (%v)", verifyPod, err)
		return
	}
	got := envs["verify"]
	want := map[string]string{"NVIDIA_VISIBLE_DEVICES": alloc.Containers[0].Devices[0].UUID, "GPUSHARE_MEMORY_LIMIT_MIB": verifyLimitMiB}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("pod %s: %s=%q, want %q (the quick start says it prints its card and limit)", verifyPod, k, got[k], v)
		}
	}
	t.Logf("pod %s on %s: NVIDIA_VISIBLE_DEVICES=%s GPUSHARE_MEMORY_LIMIT_MIB=%s GPUSHARE_ISOLATION=%s",
		verifyPod, p.Spec.NodeName, got["NVIDIA_VISIBLE_DEVICES"], got["GPUSHARE_MEMORY_LIMIT_MIB"], got["GPUSHARE_ISOLATION"])
}

// restoreDocsNode undoes what the docs' commands leave for the other
// tests: the verify pod, and node's inventory annotation (the uninstall
// page removes it; a restarted plugin publishes it at once).
func restoreDocsNode(t *testing.T, c *cluster.Cluster, node string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zero := int64(0)
	if err := c.Admin.CoreV1().Pods("default").Delete(ctx, verifyPod, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("deleting %s: %v", verifyPod, err)
	}
	n, err := c.Admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Errorf("reading node %s: %v", node, err)
		return
	}
	if _, ok := n.Annotations[gpushare.AnnotationInventory]; ok {
		return
	}
	c.StopPlugin(node, false)
	if err := c.StartPlugin(ctx, node); err != nil {
		t.Errorf("restarting %s's device plugin: %v", node, err)
		return
	}
	if err := c.WaitNodeGPUs(ctx, node, c.Node(node).TotalGiB(), time.Minute); err != nil {
		t.Errorf("%s after its plugin restarted: %v", node, err)
	}
}
