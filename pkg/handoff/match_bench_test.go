package handoff

import (
	"context"
	"math/rand/v2"
	"strconv"
	"testing"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// mibCards: four 16 GiB cards advertised in MiB, 65,536 device IDs.
var mibCards = []Card{
	{Card: gpushare.Card{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", Model: "T4"}, Units: 16384},
	{Card: gpushare.Card{Index: 1, UUID: "GPU-11111111-1111-1111-1111-111111111111", Model: "T4"}, Units: 16384},
	{Card: gpushare.Card{Index: 2, UUID: "GPU-22222222-2222-2222-2222-222222222222", Model: "T4"}, Units: 16384},
	{Card: gpushare.Card{Index: 3, UUID: "GPU-33333333-3333-3333-3333-333333333333", Model: "T4"}, Units: 16384},
}

// mibPod adds a bound pod to h whose every gpu-mem container sits on card
// index of mibCards.
func mibPod(b *testing.B, h *Handoff, w *util.PodWrapper, index int) {
	b.Helper()
	d, err := gpushare.PodDemand(w.Obj())
	if err != nil {
		b.Fatal(err)
	}
	a := &gpushare.Allocation{Node: "n1", Unit: gpushare.UnitMiB}
	for _, c := range d {
		a.Containers = append(a.Containers, gpushare.ContainerAllocation{Name: c.Name, Init: c.Init,
			Devices: []gpushare.DeviceShare{{Index: index, UUID: mibCards[index].UUID, Units: c.Units}}})
	}
	h.UpsertPod(w.Node("n1").Allocation(a).Annotation(gpushare.AnnotationAssumeTime, strconv.Itoa(index)).Obj())
}

// BenchmarkPrefer is GetPreferredAllocation on a node of four 16 GiB cards
// in MiB: kubelet offers all 65,536 IDs, shuffled (it keeps them in a
// set), less those already handed out.
func BenchmarkPrefer(b *testing.B) {
	ctx := klog.NewContext(context.Background(), klog.Background())
	var all []string
	for _, c := range mibCards {
		for k := range c.Units {
			all = append(all, DeviceID(c.UUID, k))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })

	b.Run("fresh 4096 MiB", func(b *testing.B) {
		h := New(Config{Node: "n1", Unit: gpushare.UnitMiB, Cards: mibCards})
		mibPod(b, h, util.MakePod("p").GPUMem(4096), 1)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h.Prefer(ctx, all, nil, 4096); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("8192 MiB must-include", func(b *testing.B) {
		// An init container holds 8192 IDs; kubelet hands them on to the
		// app container of the same pod.
		h := New(Config{Node: "n1", Unit: gpushare.UnitMiB, Cards: mibCards})
		mibPod(b, h, util.MakePod("p").InitGPUMem(8192).GPUMem(8192), 2)
		initIDs, err := h.Prefer(ctx, all, nil, 8192)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := h.Allocate(ctx, initIDs); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h.Prefer(ctx, all, initIDs, 8192); err != nil {
				b.Fatal(err)
			}
		}
	})
}
