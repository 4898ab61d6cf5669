package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/integration/extenders"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// TestFrozenExtender: with the shipped scheduler configuration and the
// extender frozen (SIGSTOP: it accepts connections and answers none, as a
// hung process or a blackholed Service does), pods that ask no GPU memory
// still bind, since no extender entry reaches them, while GPU pods wait;
// once the extender resumes the GPU pods bind, no card over its memory.
// The GPU pods are created first, so each of them costs kube-scheduler's
// cycle the filter's httpTimeout (2 s) before the CPU pods' turn. 200 CPU
// pods over 50 nodes must all bind within frozenCPUBound, a liveness bound
// far above what they take (the figure is printed as
// BenchmarkFrozenExtender): with the former every-pod prioritize entry
// (2 s each) they needed 400 s, and with the former filter httpTimeout
// (10 s) the ten GPU pods alone held the cycle for 100 s.
func TestFrozenExtender(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	const nodes, cpuPods, gpuPods, frozenCPUBound = 50, 200, 10, 2 * time.Minute
	listen := util.FreeAddr(t)
	cp := framework.StartT(t, framework.Options{ExtenderURL: "http://" + listen + extender.Prefix})
	admin := cp.Client(framework.AdminUser)
	ctx := context.Background()
	for i := range nodes {
		if err := createNode(ctx, admin, util.MakeNode(fmt.Sprintf("n%02d", i)).Host("32", "128Gi").Cards("T4", 16, 16).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	p, err := framework.StartProc("extender", extenders.Build(t), []string{"--kubeconfig", cp.AdminKubeconfig(), "--listen", listen},
		filepath.Join(t.TempDir(), "extender.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	waitExtenderAnswers(t, listen, "/readyz", nil)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = p.Signal(syscall.SIGCONT)
		}
	})

	start := time.Now()
	for i := range gpuPods {
		createPod(t, admin, util.MakePod(fmt.Sprintf("gpu-%02d", i)).GPUMem(int64(4+4*(i%3))).Obj())
	}
	for i := range cpuPods {
		createPod(t, admin, util.MakePod(fmt.Sprintf("cpu-%03d", i)).Requests("500m", "1Gi").Obj())
	}
	cpuBound := waitBound(t, admin, "cpu-", cpuPods, frozenCPUBound)
	t.Logf("%d pods asking no GPU memory bound over %d nodes in %v with the extender frozen", cpuPods, nodes, cpuBound.Round(100*time.Millisecond))
	if n := boundCount(t, admin, "gpu-"); n > 0 {
		t.Errorf("%d GPU pods bound while the extender was frozen", n)
	}

	if err := p.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	resumed = true
	resume := time.Now()
	gpuBound := waitBound(t, admin, "gpu-", gpuPods, 3*time.Minute)
	t.Logf("%d GPU pods bound %v after the extender resumed (%v after creation)", gpuPods, gpuBound.Round(100*time.Millisecond), time.Since(start).Round(100*time.Millisecond))
	checkNoCardOverCommitted(t, admin, 16)
	fmt.Printf("BenchmarkFrozenExtender/nodes=%d/cpu-pods=%d\t1\t%.2f cpu-bound-s\t%.2f gpu-bound-after-resume-s\n", nodes, cpuPods, cpuBound.Seconds(), time.Since(resume).Seconds())
}

func createPod(t *testing.T, client kubernetes.Interface, p *corev1.Pod) {
	t.Helper()
	p.UID = ""
	if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// boundCount counts the pods of namespace default named prefix* that are
// bound to a node.
func boundCount(t *testing.T, client kubernetes.Interface, prefix string) int {
	t.Helper()
	list, err := client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range list.Items {
		if len(p.Name) >= len(prefix) && p.Name[:len(prefix)] == prefix && p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

// waitBound waits until want pods named prefix* are bound, failing t after
// bound, and returns how long it took from the call.
func waitBound(t *testing.T, client kubernetes.Interface, prefix string, want int, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, bound, true, func(context.Context) (bool, error) {
		return boundCount(t, client, prefix) >= want, nil
	})
	if err != nil {
		t.Fatalf("%d of %d pods named %s* bound after %v", boundCount(t, client, prefix), want, prefix, bound)
	}
	return time.Since(start)
}

// checkNoCardOverCommitted fails t if the allocation annotations of the
// bound pods put more than total units on any card.
func checkNoCardOverCommitted(t *testing.T, client kubernetes.Interface, total int64) {
	t.Helper()
	list, err := client.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]int64{} // node/card index -> units
	for _, p := range list.Items {
		s, ok := p.Annotations[gpushare.AnnotationAllocation]
		if !ok || p.Spec.NodeName == "" {
			continue
		}
		a, err := gpushare.ParseAllocation(s)
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		for idx, u := range a.PerCard() {
			used[fmt.Sprintf("%s/%d", p.Spec.NodeName, idx)] += u
		}
	}
	for card, u := range used {
		if u > total {
			t.Errorf("card %s holds %d of %d units", card, u, total)
		}
	}
}
