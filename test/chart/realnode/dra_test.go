package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/version"
)

// The DRA driver's names (dra/pkg/devices; this module does not import
// the dra module).
const (
	draDriverName = "gpu.gpushare.io"
	// draNodeLabel is draDriver.nodeSelector's default label.
	draNodeLabel, draNodeValue = "gpushare.io/device-mode", "dra"
	// draDeviceClass is the chart's DeviceClass of the driver's devices.
	draDeviceClass = "gpu-mem.gpushare.io"
	// chartSchedulerName is the chart's scheduler.name.
	chartSchedulerName = "gpushare-scheduler"
)

// TestDRADriver installs the chart with the DRA driver on the real node
// (labelled a DRA node: the device plugin keeps off it) in the
// second-scheduler topology, whose webhook converts pods asking
// aliyun.com/gpu-mem that select the DRA nodes into claim pods, marked for
// the extender's node choice and sent to the chart's scheduler; the driver
// and the extender set the Go runtime's soft memory limit from their
// containers' cgroups. Pods of 4,
// 8 and 4 GiB run through the whole path: the webhook's conversion,
// kube-controller-manager's claims from the templates, kube-scheduler's
// allocation against the driver's ResourceSlice, kubelet's DRA manager
// calling the driver, and the runtime applying the driver's CDI spec: each
// container sees the card of its claim's allocation, and no card holds
// more than it has. With 12 GiB more, a pod asking 1 GiB more than any
// card has free waits. Then kubelet is killed and restarted and the
// driver's pod deleted: the claim pods' containers keep running, the
// restarted driver republishes its slice and refuses an allocation written
// by hand that would over-commit the fullest card (it restored the claims
// it had prepared), and once pod dra-1 goes, the waiting pod runs.
// Kubernetes 1.36 or later (consumable capacity): make test, make node-test.
func TestDRADriver(t *testing.T) {
	c := cluster(t)
	if minor, err := version.KubernetesMinor(c.CP.Version()); err != nil || minor < 36 {
		t.Skipf("the DRA driver shares cards from Kubernetes 1.36 (consumable capacity); this node runs %s (make test and make node-test run v1.37.2)", c.CP.Version())
	}
	ctx := context.Background()
	setNodeLabel(ctx, t, c, draNodeLabel, draNodeValue)
	t.Cleanup(func() { setNodeLabel(context.Background(), t, c, draNodeLabel, "") })
	install(ctx, t, c, SecondScheduler, map[string]any{"draDriver": map[string]any{"enabled": true}})
	uuids := waitSlice(ctx, t, c)
	// The DRA node runs the driver instead of the device plugin.
	checkSoftMemoryLimits(ctx, t, c, "extender", "dra-driver")

	const ns = "realnode-dra"
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteNamespace(context.Background(), t, c, ns) })
	sizes := []int64{4, 8, 4, 12}
	for i, gib := range sizes {
		pod := draPod(ns, fmt.Sprintf("dra-%d", i), c.Images.Probe, gib)
		if _, err := createPod(ctx, c, pod); err != nil {
			t.Fatalf("creating pod %s/%s: %v", ns, pod.Name, err)
		}
	}
	used := map[string]int64{}      // device -> MiB consumed
	deviceOf := map[string]string{} // pod -> its claim's device
	for i, gib := range sizes {
		name := fmt.Sprintf("dra-%d", i)
		pod, rep, _, err := c.WaitReport(ctx, ns, name, 0, podTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := pod.Spec.Containers[0].Resources.Limits[gpushare.ResourceGPUMem]; ok {
			t.Errorf("pod %s still asks %s: the webhook did not convert it", name, gpushare.ResourceGPUMem)
		}
		// The chart's extender rates claim pods' nodes (--dra-node-choice):
		// the webhook marks them, the marker carrying the memory for
		// quotas, and sends them to the chart's scheduler; kubelet admits
		// the marker no node advertises, whatever its quantity.
		if q, ok := pod.Spec.Containers[0].Resources.Limits[gpushare.ResourceDRAClaim]; !ok || q.Value() != gib || pod.Spec.SchedulerName != chartSchedulerName {
			t.Errorf("pod %s: limits %v, scheduler %q; want the marker %s: %d and scheduler %s", name, pod.Spec.Containers[0].Resources.Limits, pod.Spec.SchedulerName, gpushare.ResourceDRAClaim, gib, chartSchedulerName)
		}
		device, mib := claimResult(ctx, t, c, pod)
		if mib != gib*1024 {
			t.Errorf("pod %s: its claim consumes %d MiB of %s, want %d", name, mib, device, gib*1024)
		}
		used[device] += mib
		deviceOf[name] = device
		index := strings.TrimPrefix(device, "gpu-")
		for key, want := range map[string]string{EnvVisibleDevices: uuids[device], gpushare.AnnotationIndex: index} {
			if got, ok := rep.Getenv(key); !ok || got != want {
				t.Errorf("pod %s (claim on %s): the container sees %s=%q, want %q", name, device, key, got, want)
			}
		}
		t.Logf("pod %s: %d GiB on %s (%s), seen from inside", name, gib, device, uuids[device])
	}
	for device, mib := range used {
		if mib > cardGiB*1024 {
			t.Errorf("%s holds %d MiB of claims, has %d", device, mib, cardGiB*1024)
		}
	}

	var maxFree int64 // MiB, on the card with the most
	for device := range uuids {
		maxFree = max(maxFree, cardGiB*1024-used[device])
	}
	big := draPod(ns, "dra-waits", c.Images.Probe, maxFree/1024+1)
	if _, err := createPod(ctx, c, big); err != nil {
		t.Fatal(err)
	}
	waitUnschedulable(ctx, t, c, ns, big.Name)

	// Restarts: kubelet killed, then the driver's pod deleted (its
	// DaemonSet starts another, which restores its checkpoint).
	containers := func() map[string]string { // pod -> container ID
		out := map[string]string{}
		for i := range sizes {
			name := fmt.Sprintf("dra-%d", i)
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil {
				out[name] = p.Status.ContainerStatuses[0].ContainerID
			}
		}
		return out
	}
	before := containers()
	if len(before) != len(sizes) {
		t.Fatalf("before the restarts, running claim pods %v, want all %d", before, len(sizes))
	}
	if err := c.Node.RestartKubelet(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := c.deleteDaemonPod(ctx, draDriverApp); err != nil {
		t.Fatal(err)
	}
	waitSlice(ctx, t, c)
	if diff := cmp.Diff(before, containers()); diff != "" {
		t.Errorf("the claim pods' running containers across kubelet's and the driver's restarts (-before +after):\n%s", diff)
	}
	// The restarted driver counts the claims it prepared before: an
	// allocation written by hand that over-commits the fullest card is
	// refused at prepare.
	full, fullUsed := "", int64(0)
	for device, mib := range used {
		if mib > fullUsed {
			full, fullUsed = device, mib
		}
	}
	rogueGiB := (cardGiB*1024-fullUsed)/1024 + 1
	refusal := prepareRogue(ctx, t, c, ns, full, rogueGiB)
	t.Logf("after the restarts, a claim of %d GiB written by hand on %s (%d MiB prepared there): %s", rogueGiB, full, fullUsed, refusal)

	// Deleting pod dra-1 unprepares its claim in the restarted driver,
	// and the waiting pod gets the room.
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "dra-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pod, _, _, err := c.WaitReport(ctx, ns, big.Name, 0, podTimeout)
	if err != nil {
		t.Fatalf("pod %s after pod dra-1 left: %v", big.Name, err)
	}
	// Every other card had at most maxFree free before: only dra-1's has
	// room for it now.
	device, mib := claimResult(ctx, t, c, pod)
	if wantMiB := (maxFree/1024 + 1) * 1024; device != deviceOf["dra-1"] || mib != wantMiB {
		t.Errorf("pod %s once pod dra-1 left: %d MiB on %s, want %d MiB on %s, the card dra-1 held", big.Name, mib, device, wantMiB, deviceOf["dra-1"])
	}
	t.Logf("pod %s: %d MiB on %s once pod dra-1 left", big.Name, mib, device)
}

// draDriverApp is the DRA driver's pods' app.kubernetes.io/name.
const draDriverApp = "gpushare-dra-driver"

// prepareRogue creates a claim of gib GiB whose allocation on device of
// the real node is written by hand (no scheduler checks it) and a pod
// bound to the node that uses it, and waits for kubelet to report the
// driver's refusal to prepare it; it returns the event's message.
func prepareRogue(ctx context.Context, t *testing.T, c *Cluster, ns, device string, gib int64) string {
	t.Helper()
	memory := *resource.NewQuantity(gib<<30, resource.BinarySI)
	claim, err := c.Client.ResourceV1().ResourceClaims(ns).Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "rogue"},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: draDeviceClass,
				Capacity:        &resourcev1.CapacityRequirements{Requests: map[resourcev1.QualifiedName]resource.Quantity{"memory": memory}},
			},
		}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rogue"},
		Spec: corev1.PodSpec{
			NodeName: NodeName,
			Containers: []corev1.Container{{
				Name: ProbeContainer, Image: c.Images.Probe, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}},
			}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}},
		},
	}
	// The pod first, so that the claim can be reserved for its UID.
	if pod, err = c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourcev1.AllocationResult{Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: draDriverName, Pool: NodeName, Device: device,
		ShareID:          ptr.To(types.UID("0c1f2b6e-0000-4000-8000-00000000dead")),
		ConsumedCapacity: map[resourcev1.QualifiedName]resource.Quantity{"memory": memory},
	}}}}
	claim.Status.ReservedFor = []resourcev1.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	if _, err := c.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(podTimeout)
	for time.Now().Before(deadline) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil {
			t.Fatalf("pod %s runs with %d GiB written by hand on %s: the driver prepared an over-commit", pod.Name, gib, device)
		}
		events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events.Items {
			if strings.Contains(e.Message, "refusing to over-commit") {
				return e.Message
			}
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("pod %s with %d GiB written by hand on %s: no refusal to over-commit in its events after %s", pod.Name, gib, device, podTimeout)
	return ""
}

// draPod is GPUPod bound for the DRA nodes, which the webhook converts.
func draPod(ns, name, image string, gib int64) *corev1.Pod {
	p := GPUPod(ns, name, image, gib)
	p.Spec.NodeSelector = map[string]string{draNodeLabel: draNodeValue}
	return p
}

// setNodeLabel sets label key on the real node to value, or removes it
// when value is empty.
func setNodeLabel(ctx context.Context, t *testing.T, c *Cluster, key, value string) {
	t.Helper()
	v := `"` + value + `"`
	if value == "" {
		v = "null"
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, NodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Errorf("labelling node %s %s=%s: %v", NodeName, key, value, err)
	}
}

// waitSlice waits for the driver's ResourceSlice of the real node and
// returns its devices' UUIDs by device name.
func waitSlice(ctx context.Context, t *testing.T, c *Cluster) map[string]string {
	t.Helper()
	deadline := time.Now().Add(podTimeout)
	for {
		slices, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uuids := map[string]string{}
		for _, s := range slices.Items {
			if s.Spec.Driver != draDriverName || s.Spec.NodeName == nil || *s.Spec.NodeName != NodeName {
				continue
			}
			for _, d := range s.Spec.Devices {
				if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
					uuids[d.Name] = *a.StringValue
				}
			}
		}
		if len(uuids) == fakeGPUCount {
			return uuids
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ResourceSlice of %s with %d devices for node %s after %s (have %v)", draDriverName, fakeGPUCount, NodeName, podTimeout, uuids)
		}
		time.Sleep(time.Second)
	}
}

// claimResult returns the device of the driver that pod's one claim is
// allocated on, and the memory it consumes there (MiB).
func claimResult(ctx context.Context, t *testing.T, c *Cluster, pod *corev1.Pod) (string, int64) {
	t.Helper()
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s: claim statuses %+v, want one claim", pod.Name, pod.Status.ResourceClaimStatuses)
	}
	claim, err := c.Client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var results []resourcev1.DeviceRequestAllocationResult
	if claim.Status.Allocation != nil {
		results = claim.Status.Allocation.Devices.Results
	}
	if len(results) != 1 || results[0].Driver != draDriverName {
		t.Fatalf("pod %s: claim %s allocated %+v, want one device of %s", pod.Name, claim.Name, results, draDriverName)
	}
	q, ok := results[0].ConsumedCapacity["memory"]
	if !ok {
		t.Fatalf("pod %s: claim %s consumes no memory of %s", pod.Name, claim.Name, results[0].Device)
	}
	return results[0].Device, q.Value() / (1 << 20)
}

// waitUnschedulable waits until pod ns/name is reported unschedulable.
func waitUnschedulable(ctx context.Context, t *testing.T, c *Cluster, ns, name string) {
	t.Helper()
	deadline := time.Now().Add(podTimeout)
	last := ""
	for time.Now().Before(deadline) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("pod %s was placed on %s although no card has its memory free", name, p.Spec.NodeName)
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Reason == corev1.PodReasonUnschedulable {
				t.Logf("pod %s waits: %s", name, cond.Message)
				return
			}
		}
		last = describePod(p)
		time.Sleep(time.Second)
	}
	t.Errorf("pod %s neither placed nor reported unschedulable after %s: %s", name, podTimeout, last)
}
