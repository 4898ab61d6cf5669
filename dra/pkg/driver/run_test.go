package driver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/dra/pkg/checkpoint"
	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/dra/test/kubeletclient"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/isolation"
)

// pluginPod is a pod the device plugin placed on node: gib GiB of card 0
// by its allocation annotation, running.
func pluginPod(node string, gib int64) *corev1.Pod {
	alloc, err := (&gpushare.Allocation{Node: node, Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
		{Name: "c", Devices: []gpushare.DeviceShare{{Index: 0, UUID: gpu.FakeUUID(node, 0), Units: gib}}},
	}}).Encode()
	if err != nil {
		panic(err)
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "plugin-pod", UID: "plugin-pod",
			Annotations: map[string]string{gpushare.AnnotationAllocation: alloc}},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

// startRun runs the driver of node-a (two fake 16 GiB cards, no
// isolation, kubelet's directory kubeletDir) over client until the test
// ends, and returns it once it serves.
func startRun(t *testing.T, client *fake.Clientset, kubeletDir string) *Driver {
	t.Helper()
	return startRunWith(t, Config{FakeGPUs: "2xTesla-T4:16GiB", Isolation: "none", KubeletDir: kubeletDir, Client: client})
}

// startRunWith runs the driver of node-a with cfg (its CDI directory a
// new one, no kubelet registration) until the test ends, and returns it
// once it serves.
func startRunWith(t *testing.T, cfg Config) *Driver {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	cfg.NodeName, cfg.CDIDir, cfg.RegistrationDisabled = "node-a", t.TempDir(), true
	ready := make(chan *Driver, 1)
	cfg.OnReady = func(d *Driver) { ready <- d }
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case d := <-ready:
		return d
	case err := <-done:
		t.Fatalf("Run ended before it served: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the driver did not serve within a minute")
	}
	return nil
}

// sliceMemory waits until client's slice of node-a shows want (device ->
// GiB of capacity memory; a device left out is absent).
func sliceMemory(t *testing.T, client *fake.Clientset, want map[string]int64) {
	t.Helper()
	var got map[string]int64
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return false, nil
		}
		got = map[string]int64{}
		for _, d := range l.Items[0].Spec.Devices {
			q := d.Capacity["memory"].Value
			got[d.Name] = q.Value() >> 30
		}
		return cmp.Equal(want, got), nil
	})
	if err != nil {
		t.Fatalf("node-a's slice publishes %v GiB, want %v", got, want)
	}
}

// TestRunCountsTheDevicePluginsPods: on a node that moves from the device
// plugin, a pod the plugin placed still runs on card 0. The driver
// publishes card 0 with that pod's memory taken off, and refuses a claim
// that the card cannot hold beside it; once the pod finishes, the card
// is published whole and takes the claim.
func TestRunCountsTheDevicePluginsPods(t *testing.T) {
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, pluginPod("node-a", 12))
	d := startRun(t, client, t.TempDir())
	sliceMemory(t, client, map[string]int64{"gpu-0": 4, "gpu-1": 16})

	ctx := context.Background()
	over := allocated("over", "gpu-0", 8)
	over.Spec = resourceapi.ResourceClaimSpec{}
	if _, err := d.State().Prepare(ctx, over); err == nil || !strings.Contains(err.Error(), "pods of the device plugin still running there 12288 MiB") {
		t.Errorf("8 GiB on gpu-0 beside the plugin's 12 GiB pod: err = %v, want an over-commit refusal naming the plugin's pods", err)
	}

	pod := pluginPod("node-a", 12)
	pod.Status.Phase = corev1.PodSucceeded
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sliceMemory(t, client, map[string]int64{"gpu-0": 16, "gpu-1": 16})
	if _, err := d.State().Prepare(ctx, over); err != nil {
		t.Errorf("8 GiB on gpu-0 once the plugin's pod finished: %v", err)
	}
}

// TestRunDropsClaimsKubeletNeverUnprepared: the checkpoint holds two
// claims on gpu-0 (kubelet prepared them and then lost its own record of
// them): one the API still allocates on node-a, and one the API no longer
// has. The driver drops the second, once it has checked with the API,
// and the memory it held takes a new claim; it keeps the first.
func TestRunDropsClaimsKubeletNeverUnprepared(t *testing.T) {
	kubeletDir := t.TempDir()
	cp, err := checkpoint.Open(filepath.Join(kubeletDir, "plugins", devices.DriverName))
	if err != nil {
		t.Fatal(err)
	}
	kept, gone := allocated("kept", "gpu-0", 4), allocated("gone", "gpu-0", 12)
	for _, c := range []*resourceapi.ResourceClaim{kept, gone} {
		mib := c.Status.Allocation.Devices.Results[0].ConsumedCapacity[devices.CapacityMemory]
		dev := checkpoint.Device{Request: "gpu", Pool: "node-a", Device: "gpu-0", UUID: gpu.FakeUUID("node-a", 0), MiB: mib.Value() >> 20}
		if err := cp.Put(c.UID, checkpoint.Claim{Namespace: c.Namespace, Name: c.Name, Devices: []checkpoint.Device{dev}}); err != nil {
			t.Fatal(err)
		}
	}
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, kept)
	d := startRun(t, client, kubeletDir)
	err = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, ok := d.State().Prepared()[gone.UID]
		return !ok, nil
	})
	if err != nil {
		t.Fatalf("claim gone, which the API no longer has, is still prepared: %v", d.State().Prepared())
	}
	if _, ok := d.State().Prepared()[kept.UID]; !ok {
		t.Error("claim kept, which the API allocates on node-a, was dropped")
	}
	if _, err := d.State().Prepare(context.Background(), allocated("new", "gpu-0", 12)); err != nil {
		t.Errorf("12 GiB on gpu-0 where the dropped claim held 12: %v", err)
	}
}

// TestRunPreparesOtherCardsWhileOneWaitsForMPS: two mps cards, whose
// daemons run in their own container (--mps-daemons=external); that side
// answers for gpu-1 only. A claim on gpu-0 waits for its card's daemon;
// meanwhile kubelet's call for a claim on gpu-1 is answered. Once gpu-0's
// daemon answers too, the first claim is prepared.
func TestRunPreparesOtherCardsWhileOneWaitsForMPS(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	mpsRoot, err := os.MkdirTemp("/tmp", "mps") // MPS's socket paths want a short root
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(mpsRoot) })
	slow, fast := allocated("slow", "gpu-0", 4), allocated("fast", "gpu-1", 4)
	client := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}, slow, fast)
	kubeletDir := t.TempDir()
	startRunWith(t, Config{
		FakeGPUs: "2xTesla-T4:16GiB", FakeDriver: "615.00,mps", Isolation: "mps",
		MPSControl: "/bin/true", MPSDaemons: isolation.MPSDaemonsExternal, MPSRoot: mpsRoot,
		KubeletDir: kubeletDir, Client: client,
	})
	// The daemons' side of each card, once answering: its status, fresh,
	// replaced whole as that side replaces it.
	answer := func(index int) {
		status := filepath.Join(mpsRoot, gpu.FakeUUID("node-a", index), "status.json")
		go func() {
			for ctx.Err() == nil {
				if os.WriteFile(status+".tmp", []byte(`{"defaultLimitMiB": 16384}`), 0o644) == nil {
					_ = os.Rename(status+".tmp", status)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}()
	}
	if err := os.MkdirAll(filepath.Join(mpsRoot, gpu.FakeUUID("node-a", 1)), 0o755); err != nil {
		t.Fatal(err)
	}
	answer(1)

	kubelet := kubeletclient.Client{Socket: filepath.Join(kubeletDir, "plugins", devices.DriverName, "dra.sock")}
	slowDone := make(chan error, 1)
	go func() {
		_, err := kubelet.Prepare(ctx, kubeletclient.ClaimOf(slow))
		slowDone <- err
	}()
	// Claim slow waits for gpu-0's daemon once it has asked for it.
	desired := filepath.Join(mpsRoot, gpu.FakeUUID("node-a", 0), "desired.json")
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, err := os.Stat(desired)
		return err == nil, nil
	}); err != nil {
		t.Fatalf("claim slow never asked for gpu-0's MPS daemon (%s)", desired)
	}
	if _, err := kubelet.Prepare(ctx, kubeletclient.ClaimOf(fast)); err != nil {
		t.Fatalf("claim fast on gpu-1: %v", err)
	}
	select {
	case err := <-slowDone:
		t.Fatalf("claim fast on gpu-1 was answered only after claim slow on gpu-0 had ended (%v): it waited for gpu-0's MPS daemon", err)
	default:
	}
	answer(0)
	if err := <-slowDone; err != nil {
		t.Errorf("claim slow once gpu-0's daemon answers: %v", err)
	}
}
