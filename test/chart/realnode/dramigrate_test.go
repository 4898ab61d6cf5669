package realnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/version"
)

// TestDRADriverMigration follows docs/dra.md's steps for moving a node
// from the device plugin to the DRA driver while a pod of the device
// plugin still runs there. The chart is installed with the driver; the
// node, not labelled yet, runs the device plugin, which takes a 12 GiB
// aliyun.com/gpu-mem pod on one card. The node is then labelled
// gpushare.io/device-mode=dra: the device plugin leaves it, the pod keeps
// running, and the driver publishes that card with the pod's 12 GiB taken
// off. Claim pods of 8, 8 and 4 GiB fit beside it (the first two on the
// other card, the third on the pod's), one more of 8 GiB waits, and no
// card ever holds more than its 16 GiB. Once the device plugin's pod is
// gone the card is published whole again and the waiting pod runs there.
func TestDRADriverMigration(t *testing.T) {
	c := cluster(t)
	if minor, err := version.KubernetesMinor(c.CP.Version()); err != nil || minor < 36 {
		t.Skipf("the DRA driver shares cards from Kubernetes 1.36 (consumable capacity); this node runs %s (make test and make node-test run v1.37.2)", c.CP.Version())
	}
	ctx := context.Background()
	t.Cleanup(func() { setNodeLabel(context.Background(), t, c, draNodeLabel, "") })
	install(ctx, t, c, SecondScheduler, map[string]any{"draDriver": map[string]any{"enabled": true}})
	const ns = "realnode-dra-migration"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(context.Background(), t, c, ns) })

	// The device plugin's pod, before the move.
	const legacyGiB = 12
	if _, err := createPod(ctx, c, GPUPod(ns, "legacy", c.Images.Probe, legacyGiB)); err != nil {
		t.Fatal(err)
	}
	pod, rep, run, err := c.WaitReport(ctx, ns, "legacy", 0, podTimeout)
	if err != nil {
		t.Fatal(err)
	}
	placed, err := CheckPlacement(pod, rep, run)
	if err != nil {
		t.Fatal(err)
	}
	legacyDev, otherDev := fmt.Sprintf("gpu-%d", placed.Card), fmt.Sprintf("gpu-%d", 1-placed.Card)
	t.Logf("pod legacy: %d GiB on card %d through the device plugin", placed.Units, placed.Card)

	// The documented step: label the node. The device plugin leaves, the
	// driver comes and publishes what the pod leaves of its card.
	setNodeLabel(ctx, t, c, draNodeLabel, draNodeValue)
	waitSlice(ctx, t, c)
	waitSliceMemory(ctx, t, c, map[string]int64{legacyDev: cardGiB - legacyGiB, otherDev: cardGiB})
	if p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "legacy", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod legacy after the move: %v, %v; want it still running", describePodOrNil(p), err)
	}

	used := map[string]int64{legacyDev: legacyGiB * 1024} // device -> MiB held
	for i, gib := range []int64{8, 8, 4} {
		name := fmt.Sprintf("claim-%d", i)
		if _, err := createPod(ctx, c, draPod(ns, name, c.Images.Probe, gib)); err != nil {
			t.Fatal(err)
		}
		pod, _, _, err := c.WaitReport(ctx, ns, name, 0, podTimeout)
		if err != nil {
			t.Fatal(err)
		}
		device, mib := claimResult(ctx, t, c, pod)
		used[device] += mib
		t.Logf("pod %s: %d GiB on %s", name, gib, device)
	}
	if diff := cmp.Diff(map[string]int64{legacyDev: cardGiB * 1024, otherDev: cardGiB * 1024}, used); diff != "" {
		t.Errorf("MiB held on each card by the device plugin's pod and the claims (-want +got):\n%s", diff)
	}
	waits := draPod(ns, "waits", c.Images.Probe, 8)
	if _, err := createPod(ctx, c, waits); err != nil {
		t.Fatal(err)
	}
	waitUnschedulable(ctx, t, c, ns, waits.Name)

	// The device plugin's pod goes: its card is whole again.
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "legacy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSliceMemory(ctx, t, c, map[string]int64{legacyDev: cardGiB, otherDev: cardGiB})
	pod, _, _, err = c.WaitReport(ctx, ns, waits.Name, 0, podTimeout)
	if err != nil {
		t.Fatalf("pod %s once the device plugin's pod left: %v", waits.Name, err)
	}
	if device, mib := claimResult(ctx, t, c, pod); device != legacyDev || mib != 8*1024 {
		t.Errorf("pod %s: %d MiB on %s, want 8192 on %s, the card the device plugin's pod left", waits.Name, mib, device, legacyDev)
	}
}

// waitSliceMemory waits until the driver's slice of the real node
// publishes want (device -> GiB of capacity memory).
func waitSliceMemory(ctx context.Context, t *testing.T, c *Cluster, want map[string]int64) {
	t.Helper()
	deadline := time.Now().Add(podTimeout)
	var got map[string]int64
	for time.Now().Before(deadline) {
		slices, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = map[string]int64{}
		for _, s := range slices.Items {
			if s.Spec.Driver != draDriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != NodeName {
				continue
			}
			for _, d := range s.Spec.Devices {
				q := d.Capacity["memory"].Value
				got[d.Name] = q.Value() >> 30
			}
		}
		if cmp.Equal(want, got) {
			t.Logf("the driver publishes %v GiB", got)
			return
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("the driver's slice of %s publishes %v GiB after %s, want %v", NodeName, got, podTimeout, want)
}

// describePodOrNil is describePod, or "no pod".
func describePodOrNil(p *corev1.Pod) string {
	if p == nil {
		return "no pod"
	}
	return describePod(p)
}
