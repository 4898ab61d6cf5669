package framework

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"
)

func TestControlPlaneSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	start := time.Now()
	cp := StartT(t, Options{Scheduler: true, Users: []User{{Name: "alice", Groups: []string{"dev"}}}})
	t.Logf("start-up took %s", time.Since(start).Round(100*time.Millisecond))

	// The shipped scheduler config was loaded, overridden and stripped of its extenders.
	data, err := os.ReadFile(filepath.Join(cp.Dir(), "kube-scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg["extenders"]; ok {
		t.Errorf("scheduler config still has extenders:\n%s", data)
	}
	if got := cfg["clientConnection"].(map[string]any)["qps"]; got != float64(500) {
		t.Errorf("clientConnection.qps = %v, want 500 kept from the shipped config", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := cp.Client(AdminUser)
	const ns = "smoke"
	if err := cp.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"kubernetes.io/hostname": "node-1"}}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating node: %v", err)
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	status := map[string]any{"status": corev1.NodeStatus{
		Capacity:    res,
		Allocatable: res,
		Conditions: []corev1.NodeCondition{{
			Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}},
	}}
	patchJSON, err := json.Marshal(status)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "node-1", types.MergePatchType, patchJSON, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("patching node status: %v", err)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	scheduled := time.Now()
	var nodeName string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := admin.CoreV1().Pods(ns).Get(ctx, "smoke", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		nodeName = p.Spec.NodeName
		return nodeName != "", nil
	})
	if err != nil {
		t.Fatalf("waiting for the pod to be scheduled: %v", err)
	}
	if nodeName != "node-1" {
		t.Errorf("pod scheduled to %q, want node-1", nodeName)
	}
	t.Logf("pod scheduled to %s in %s", nodeName, time.Since(scheduled).Round(10*time.Millisecond))

	// RBAC is on: alice is authenticated but may not list pods.
	_, err = cp.Client("alice").CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("alice listing pods: err = %v, want Forbidden", err)
	} else if !strings.Contains(err.Error(), `"alice"`) {
		t.Errorf("Forbidden error does not name alice: %v", err)
	}

	// The kubeconfig files point at the same server.
	if kc, err := os.ReadFile(cp.KubeconfigFor("alice")); err != nil || !strings.Contains(string(kc), cp.APIServerURL()) {
		t.Errorf("alice's kubeconfig lacks %s (err %v)", cp.APIServerURL(), err)
	}

	// Stop is idempotent and leaves nothing running.
	pids := cp.PIDs()
	cp.Stop()
	cp.Stop()
	for name, pid := range pids {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			if b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat")); !strings.Contains(string(b), ") Z") {
				t.Errorf("%s (pid %d) still running after Stop", name, pid)
			}
		}
	}
}
