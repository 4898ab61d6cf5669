package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// TestExtenderRatesClaimPods: the extender with --dra-node-choice in the
// shipped kube-scheduler configuration (config/kube-scheduler-config.yaml:
// a filter-only, ignorable entry for pods marked gpushare.io/dra-claim) on
// four DRA nodes of one 16 GiB card each. Pods converted as the webhook
// converts them with node choice (the marker) are allocated by the real
// 1.37 kube-scheduler, but on the node the extender's policy (binpack
// here) rates best: six pods of 2 GiB all land on one node and its one
// card, where kube-scheduler alone spreads them (it scores nodes by CPU
// and memory only, and these are all alike). The marker does not make
// kube-scheduler refuse the pods (ignoredByScheduler), and once the
// extender is stopped a marked pod still schedules (the entry is
// ignorable): the extender's failure costs claim pods its node choice,
// never their scheduling.
func TestExtenderRatesClaimPods(t *testing.T) {
	listen := util.FreeAddr(t)
	nodes := map[string]string{}
	for _, n := range []string{"dra-a", "dra-b", "dra-c", "dra-d"} {
		nodes[n] = "1xTesla-T4:16GiB"
	}
	c := startDRAWith(t, nodes, "http://"+listen+extender.Prefix)
	ctx := context.Background()
	labels, err := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{"gpushare.io/device-mode": "dra"}}})
	if err != nil {
		t.Fatal(err)
	}
	for n := range nodes {
		if _, err := c.admin.CoreV1().Nodes().Patch(ctx, n, types.MergePatchType, labels, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stop := runExtender(t, extender.Config{Kubeconfig: c.cp.AdminKubeconfig(), Listen: listen, Policy: allocator.NameBinpack,
		QPS: 100, Burst: 200, DRANodeChoice: true, WebhookDRAUnit: gpushare.UnitGiB})

	var first string
	for i := range 6 {
		name := fmt.Sprintf("packed-%d", i)
		c.createConvertedWith(t, name, 2, true)
		pod := c.waitPod(t, name, true)
		claim, err := c.podClaimNamed(ctx, pod, draclaim.ClaimName)
		if err != nil {
			t.Fatal(err)
		}
		a := allocationOf(t, claim)
		if first == "" {
			first = pod.Spec.NodeName
		}
		if pod.Spec.NodeName != first || a.pool != first || a.device != "gpu-0" || a.mib != 2048 {
			t.Errorf("pod %s: node %s, allocation %+v; want 2048 MiB of %s/gpu-0, the node binpack filled first", name, pod.Spec.NodeName, a, first)
		}
	}
	t.Logf("six claim pods of 2 GiB, rated by the extender (binpack), all on %s", first)

	stop()
	c.createConvertedWith(t, "extender-down", 2, true)
	pod := c.waitPod(t, "extender-down", true)
	t.Logf("with the extender stopped, a marked claim pod still scheduled, on %s", pod.Spec.NodeName)
}

// runExtender runs the extender in this process until the returned stop,
// and waits until it is ready.
func runExtender(t *testing.T, cfg extender.Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().WithName("extender")))
	done := make(chan error, 1)
	go func() { done <- extender.Run(ctx, cfg) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("extender: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("the extender ended: %w", err)
		default:
		}
		resp, err := http.Get("http://" + cfg.Listen + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("waiting for the extender: %v", err)
	}
	return stop
}
