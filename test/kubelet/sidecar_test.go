package kubelet_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/util"
)

// TestSidecarBeforeInitIsCharged: kubelet keeps a sidecar's devices out of
// the pool later containers reuse, so a plain init container declared after
// a sidecar holds its own devices beside the sidecar's. The extender's cache
// places pods on this node's cards as the extender would, kubelet's own
// device manager admits them: if the cache charged such a pod less than
// kubelet holds, the next pod would be placed on a card kubelet has no room
// on, and the plugin would have to relocate it.
func TestSidecarBeforeInitIsCharged(t *testing.T) {
	e := start(t, setup{fakeGPUs: "2xTesla-T4:16GiB"})
	c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	inv := &gpushare.Inventory{Unit: gpushare.UnitGiB}
	for i, d := range e.cards {
		inv.Devices = append(inv.Devices, gpushare.Device{Index: i, UUID: d.UUID, Model: d.Model, Memory: d.MemoryMiB / 1024, Healthy: true})
	}
	if err := c.SetNode(util.MakeNode(nodeName).Inventory(inv).Obj()); err != nil {
		t.Fatal(err)
	}

	// A: sidecar 4, then init 8 (beside the sidecar: 12), then app 2.
	restartable := corev1.ContainerRestartPolicyAlways
	a := util.MakePod("a").InitGPUMem(4).InitGPUMem(8).GPUMem(2)
	a.Spec.InitContainers[0].RestartPolicy = &restartable
	// B: 8, which fits only where A is not.
	b := util.MakePod("b").GPUMem(8)

	at := time.Now()
	var adms []admission
	var pods []*corev1.Pod
	for _, w := range []*util.PodWrapper{a, b} {
		alloc, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(w.Obj()), nodeName)
		if err != nil {
			t.Fatalf("placing %s: %v", w.Obj().Name, err)
		}
		c.FinishBinding(w.Obj().UID)
		cards := map[string][]int{}
		for _, ca := range alloc.Containers {
			for _, d := range ca.Devices {
				cards[ca.Name] = append(cards[ca.Name], d.Index)
			}
		}
		pod := e.bind(w, cards, at)
		res, err := e.host.Admit(pod)
		if err != nil {
			t.Fatalf("admitting %s: %v", pod.Name, err)
		}
		adms = append(adms, admission{pod: pod, results: res})
		pods = append(pods, pod)
	}
	final := e.settle(pods)
	for _, bad := range e.check(adms, final) {
		t.Error(bad)
	}
	if st := e.handoff.Stats(); st.Relocated != 0 {
		t.Errorf("%d containers relocated: the cache placed a pod where kubelet had no room (stats %+v)", st.Relocated, st)
	}
}
