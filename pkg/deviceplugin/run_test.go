package deviceplugin

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/util"
)

// boundPod is a pod bound to node n1 of devs with each container on the
// card given (container name -> card index), waiting for kubelet.
func boundPod(w *util.PodWrapper, devs []gpu.Device, cards map[string]int) *corev1.Pod {
	d, _ := gpushare.PodDemand(w.Obj())
	a := &gpushare.Allocation{Node: "n1", Unit: gpushare.UnitGiB}
	for _, c := range d {
		idx := cards[c.Name]
		a.Containers = append(a.Containers, gpushare.ContainerAllocation{Name: c.Name, Init: c.Init,
			Devices: []gpushare.DeviceShare{{Index: idx, UUID: devs[idx].UUID, Units: c.Units}}})
	}
	return w.Node("n1").Allocation(a).Annotation(gpushare.AnnotationAssigned, "false").Obj()
}

// TestRelistReplacesARecreatedPod: a pod deleted and re-created under the
// same name while the plugin's watch was down. The watch ends with 410
// Gone, the reflector relists, and the informer delivers one update from
// the old pod to the new one, no delete. The plugin must forget the old
// pod (its grants, its waiting containers) as if it had seen the delete.
func TestRelistReplacesARecreatedPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	devs, err := gpu.ParseFakeGPUs("2xTesla-T4:16GiB", "n1")
	if err != nil {
		t.Fatal(err)
	}
	old := boundPod(util.MakePod("p").UID("uid-old").GPUMem(4).GPUMem(4), devs, map[string]int{"c0": 0, "c1": 0})
	client := fake.NewClientset(util.MakeNode("n1").Obj(), old)
	// The tracker's own events never reach the informer: only a relist.
	gap := util.NewWatchGap(client, "pods")
	ready := make(chan *handoff.Handoff, 1)
	done := make(chan error, 1)
	go func() {
		done <- runPlugin(ctx, Config{NodeName: "n1", Unit: gpushare.UnitGiB, DeviceListStrategy: StrategyEnvvar, KubeletDir: t.TempDir(),
			Client: client, GPUs: gpu.NewFake(devs), OnReady: func(h *handoff.Handoff) { ready <- h }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var h *handoff.Handoff
	select {
	case h = <-ready:
	case err := <-done:
		t.Fatalf("Run ended before serving: %v", err)
	}

	// kubelet admits the old pod's first container.
	if a, err := h.Allocate(ctx, unitsOn(devs[0].UUID, 0, 4)); err != nil || a.Pod != "uid-old" || a.Container != "c0" {
		t.Fatalf("Allocate = %+v, %v; want the old pod's c0", a, err)
	}

	// The old pod goes and a new one takes its name; the plugin's watch
	// is down and hears of neither.
	pods := client.Tracker()
	gvr := corev1.SchemeGroupVersion.WithResource("pods")
	if err := pods.Delete(gvr, "default", "p"); err != nil {
		t.Fatal(err)
	}
	recreated := boundPod(util.MakePod("p").UID("uid-new").GPUMem(8), devs, map[string]int{"c0": 1})
	if err := pods.Add(recreated); err != nil {
		t.Fatal(err)
	}
	if !gap.Expire() {
		t.Fatal("the informer opened no watch")
	}
	waitFor(t, "the relist to deliver the new pod", func() bool { ns, _, _ := h.Desired("uid-new"); return ns != "" })

	if _, _, ok := h.Grant("uid-old", "c0"); ok {
		t.Error("the old pod's grant survived the relist")
	}
	if ns, _, _ := h.Desired("uid-old"); ns != "" {
		t.Error("the handoff still holds the old pod")
	}
	if n := h.Waiting(); n != 1 {
		t.Errorf("Waiting() = %d, want 1 (the new pod)", n)
	}
	// The old pod's second container no longer waits for 4 units.
	if a, err := h.Allocate(ctx, unitsOn(devs[0].UUID, 4, 4)); !errors.Is(err, handoff.ErrNoMatch) {
		t.Errorf("Allocate(4 units) = %+v, %v; want %v: only the new pod's 8 units wait", a, err, handoff.ErrNoMatch)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
