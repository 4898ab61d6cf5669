package nodeagent

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

const node = "gpu-a"

// TestAgent runs the agent and our device plugin in-process on one fake
// clientset: the node is registered with the plugin's capacity, a bound pod
// is admitted through kubelet's device manager with the annotated card in
// its environment, a pod without an allocation is failed as kubelet does,
// and a deleted pod's devices are given back.
func TestAgent(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	dir := t.TempDir()
	client := fake.NewClientset()
	agentDone, pluginDone := make(chan error, 1), make(chan error, 1)
	go func() {
		agentDone <- Run(ctx, Config{NodeName: node, Client: client, KubeletDir: dir, Address: "10.0.0.1",
			SyncPeriod: 50 * time.Millisecond, HeartbeatPeriod: 100 * time.Millisecond})
	}()
	t.Cleanup(func() {
		cancel()
		for name, ch := range map[string]chan error{"agent": agentDone, "plugin": pluginDone} {
			if err := <-ch; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
	poll(t, "kubelet.sock", func() bool {
		_, err := os.Stat(filepath.Join(dir, "device-plugins", "kubelet.sock"))
		return err == nil
	})
	devs, err := gpu.ParseFakeGPUs("2xTesla-T4:16GiB", node)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		pluginDone <- runDevicePlugin(ctx, deviceplugin.Config{
			NodeName: node, Unit: gpushare.UnitGiB, DeviceListStrategy: deviceplugin.StrategyEnvvar, KubeletDir: dir,
			VerifyPeriod: 200 * time.Millisecond, Client: client, GPUs: gpu.NewFake(devs),
		})
	}()
	poll(t, "node capacity 32 GiB, ready", func() bool {
		n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false
		}
		q := n.Status.Allocatable[gpushare.ResourceGPUMem]
		ready := len(n.Status.Conditions) > 0 && n.Status.Conditions[0].Type == corev1.NodeReady && n.Status.Conditions[0].Status == corev1.ConditionTrue
		return q.Value() == 32 && ready && n.Status.Addresses[0].Address == "10.0.0.1"
	})
	if _, err := client.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(ctx, node, metav1.GetOptions{}); err != nil {
		t.Errorf("no node lease: %v", err)
	}

	bind := func(name string, units int64, card int) *corev1.Pod {
		a := &gpushare.Allocation{Node: node, Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
			{Name: "c0", Devices: []gpushare.DeviceShare{{Index: card, UUID: devs[card].UUID, Units: units}}},
		}}
		p := util.MakePod(name).GPUMem(units).Node(node).Allocation(a).
			Annotation(gpushare.AnnotationIndex, strconv.Itoa(card)).
			Annotation(gpushare.AnnotationAssigned, "false").
			Annotation(gpushare.AnnotationAssumeTime, strconv.FormatInt(time.Now().UnixNano(), 10)).Obj()
		p.CreationTimestamp = metav1.Now()
		created, err := client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	running := func(p *corev1.Pod) *corev1.Pod {
		t.Helper()
		var got *corev1.Pod
		poll(t, "pod "+p.Name+" running", func() bool {
			got, err = client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.PodRunning && got.Annotations[AnnotationEnv] != ""
		})
		return got
	}

	p := running(bind("small", 4, 1))
	var env map[string]map[string]string
	if err := json.Unmarshal([]byte(p.Annotations[AnnotationEnv]), &env); err != nil {
		t.Fatal(err)
	}
	if got := env["c0"][deviceplugin.EnvVisibleDevices]; got != devs[1].UUID {
		t.Errorf("container env %s=%q, want card 1's UUID %s", deviceplugin.EnvVisibleDevices, got, devs[1].UUID)
	}
	var ids map[string][]string
	if err := json.Unmarshal([]byte(p.Annotations[AnnotationDevices]), &ids); err != nil {
		t.Fatal(err)
	}
	if len(ids["c0"]) != 4 || !strings.HasPrefix(ids["c0"][0], devs[1].UUID) {
		t.Errorf("kubelet's devices for c0: %v, want 4 IDs of card 1", ids["c0"])
	}
	if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil || !cs[0].Ready {
		t.Errorf("container statuses %+v, want c0 running and ready", cs)
	}

	refused := util.MakePod("no-allocation").GPUMem(4).Node(node).Obj()
	if _, err := client.CoreV1().Pods("default").Create(ctx, refused, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll(t, "pod no-allocation failed by kubelet", func() bool {
		got, err := client.CoreV1().Pods("default").Get(ctx, "no-allocation", metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodFailed && got.Status.Reason == reasonAdmission &&
			strings.Contains(got.Status.Message, "has no gpushare.io/allocation annotation")
	})
	evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range evs.Items {
		found = found || (e.Reason == reasonAdmission && e.InvolvedObject.Name == "no-allocation")
	}
	if !found {
		t.Errorf("no %s event for pod no-allocation among %d events", reasonAdmission, len(evs.Items))
	}

	// Card 1 has 16 GiB; "small" holds 4. Once it is deleted, a 16 GiB pod
	// fits there only if kubelet's device manager has given its devices back.
	if err := client.CoreV1().Pods("default").Delete(ctx, "small", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// No wait needed: the informer delivers the deletion (which releases)
	// before the next pod's addition.
	running(bind("full", 16, 1))
}

func poll(t *testing.T, what string, ok func() bool) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 15*time.Second, true, func(context.Context) (bool, error) {
		return ok(), nil
	}); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// runDevicePlugin builds the device plugin from cfg and serves it until
// ctx ends.
func runDevicePlugin(ctx context.Context, cfg deviceplugin.Config) error {
	p, err := deviceplugin.New(ctx, cfg)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}
