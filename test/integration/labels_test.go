package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// TestNodeLabelsFollowTheCards runs the device plugin on fake cards, as
// its own service account with a token bound to its pod (as the DaemonSet
// runs it), against a real kube-apiserver enforcing the shipped admission
// policies and a real kube-scheduler with the extender: the node's labels
// appear with the cards, follow a card that fails and recovers, and select
// the node for a pod by model through kube-scheduler's NodeAffinity.
func TestNodeLabelsFollowTheCards(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	applyManifests(t, c.admin, "manifests/deviceplugin/rbac.yaml", nodeScopePolicyFile)
	// kubelet would report the cards' memory from the plugin's
	// ListAndWatch; there is no kubelet here, so the node states it.
	t4 := util.MakeNode("t4-1").Obj()
	for _, rl := range []corev1.ResourceList{t4.Status.Capacity, t4.Status.Allocatable} {
		rl[gpushare.ResourceGPUMem] = resource.MustParse("32")
	}
	c.addNode(t, t4)
	// A node whose labels another component (GPU Feature Discovery) owns.
	c.addNode(t, util.MakeNode("a100-1").Cards("NVIDIA-A100-SXM4-80GB", 80).
		Label(gpushare.NVIDIALabelProduct, "NVIDIA-A100-SXM4-80GB").Label(gpushare.GFDTimestampLabel, "1700000000").Obj())
	createPods(t, c.admin, pluginPod("plugin-t4", "t4-1"))
	client := podTokenClient(t, c.cp, "plugin-t4")
	waitEnforced(t, nodeScopePolicy, patchNode(client, "a100-1", `{"metadata":{"labels":{"x":"y"}}}`))

	control := filepath.Join(t.TempDir(), "fake-control")
	pctx, stop := context.WithCancel(klog.NewContext(ctx, klog.Background().WithName("device-plugin")))
	done := &pluginRun{ended: make(chan struct{})}
	go func() {
		defer close(done.ended)
		p, err := deviceplugin.New(pctx, deviceplugin.Config{NodeName: "t4-1", Unit: gpushare.UnitGiB, DeviceListStrategy: deviceplugin.StrategyEnvvar,
			KubeletDir: t.TempDir(), FakeGPUs: "2xTesla-T4:16GiB", FakeDriver: "550.54.15", Isolation: "none", FakeControl: control,
			HealthCheck: true, RecoveryWindow: time.Second, Client: client, QPS: 50, Burst: 100})
		if err == nil {
			err = p.Run(pctx)
		}
		done.err = err
	}()
	defer func() {
		stop()
		<-done.ended
		if done.err != nil {
			t.Errorf("device plugin: %v", done.err)
		}
	}()

	want := map[string]string{
		gpushare.LabelProduct: "Tesla-T4", gpushare.LabelMemory: "16384", gpushare.LabelCount: "2",
		gpushare.LabelDriver: "550.54.15", gpushare.LabelCUDA: "12.4", gpushare.LabelIsolation: "none",
		gpushare.NVIDIALabelProduct: "Tesla-T4", gpushare.NVIDIALabelMemory: "16384", gpushare.NVIDIALabelCount: "2",
		gpushare.NVIDIALabelDriverFull: "550.54.15", gpushare.NVIDIALabelDriverMajor: "550", gpushare.NVIDIALabelDriverMinor: "54",
		gpushare.NVIDIALabelDriverRev: "15", gpushare.NVIDIALabelRuntimeFull: "12.4", gpushare.NVIDIALabelRuntimeMajor: "12",
		gpushare.NVIDIALabelRuntimeMinor: "4",
	}
	waitLabels(t, c, "t4-1", "the cards appear", want, done)

	// Card 1 falls off the bus, and stays unhealthy until its probe passes.
	fakeGPU(t, control, "probe 1 fail")
	fakeGPU(t, control, "xid 1 79")
	waitLabels(t, c, "t4-1", "card 1 failed", map[string]string{gpushare.LabelCount: "1", gpushare.NVIDIALabelCount: "1"}, done)
	fakeGPU(t, control, "probe 1 ok")
	waitLabels(t, c, "t4-1", "card 1 recovered", map[string]string{gpushare.LabelCount: "2", gpushare.NVIDIALabelCount: "2"}, done)

	// A pod selecting the model by label lands on the T4 node, through
	// kube-scheduler's NodeAffinity and the extender.
	c.createPod(t, util.MakePod("wants-t4").GPUMem(8).NodeSelector(gpushare.NVIDIALabelProduct, "Tesla-T4").Obj())
	c.waitBound(t, []string{"wants-t4"}, 30*time.Second)
	if p, err := c.admin.CoreV1().Pods("default").Get(ctx, "wants-t4", metav1.GetOptions{}); err != nil || p.Spec.NodeName != "t4-1" {
		t.Errorf("wants-t4 on %q (err %v), want t4-1", p.Spec.NodeName, err)
	}
	a100, err := c.admin.CoreV1().Nodes().Get(ctx, "a100-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := a100.Labels[gpushare.NVIDIALabelProduct]; got != "NVIDIA-A100-SXM4-80GB" {
		t.Errorf("a100-1's %s = %q: another node's labels were touched", gpushare.NVIDIALabelProduct, got)
	}
}

// pluginRun is a device plugin running in the test: ended is closed when
// it has returned err.
type pluginRun struct {
	ended chan struct{}
	err   error
}

// waitLabels waits until node carries every label of want, failing the
// test, with what it carries, when it does not within 30 s or the plugin
// ends.
func waitLabels(t *testing.T, c *cluster, node, what string, want map[string]string, run *pluginRun) {
	t.Helper()
	var got map[string]string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-run.ended:
			return false, fmt.Errorf("the device plugin ended: %w", run.err)
		default:
		}
		n, err := c.admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = n.Labels
		for k, v := range want {
			if got[k] != v {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%s: node %s labels %v, want %v: %v", what, node, got, want, err)
	}
}

// fakeGPU hands a command to the plugin's fake cards (gpu.Fake.Apply)
// through its control file and waits until the plugin has taken it.
func fakeGPU(t *testing.T, control, command string) {
	t.Helper()
	tmp := control + ".tmp"
	if err := os.WriteFile(tmp, []byte(command+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, control); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(control)
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Fatalf("the plugin did not take %q", command)
	}
}
