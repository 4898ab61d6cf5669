package handoff

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// aliyunIDs returns n device IDs in the format of Aliyun's device plugin,
// "<UUID>-_-<k>", k = from .. from+n-1, sorted as strings.
func aliyunIDs(uuid string, from, n int) []string {
	var out []string
	for k := from; k < from+n; k++ {
		out = append(out, fmt.Sprintf("%s-_-%d", uuid, k))
	}
	slices.Sort(out)
	return out
}

// aliyunPod is a pod bound to n1 as Aliyun's scheduler extender leaves
// it: the ALIYUN_COM_GPU_MEM_* annotations only (idx < 0: none).
func aliyunPod(name string, units int64, idx int) *corev1.Pod {
	w := util.MakePod(name).GPUMem(units).Node("n1").Phase(corev1.PodRunning)
	if idx >= 0 {
		w.Annotation(gpushare.AnnotationIndex, strconv.Itoa(idx)).
			Annotation(gpushare.AnnotationPodMem, strconv.FormatInt(units, 10)).
			Annotation(gpushare.AnnotationDevMem, "16").
			Annotation(gpushare.AnnotationAssigned, "true").
			Annotation(gpushare.AnnotationAssumeTime, "1700000000000000000")
	}
	return w.Obj()
}

// TestHandoffLegacyPods: pods kubelet admitted through Aliyun's device
// plugin hold IDs this plugin never advertised. They are adopted on the
// card ALIYUN_COM_GPU_MEM_IDX names (not the one the IDs' UUID names:
// Aliyun's plugin ignored the IDs), never matched or patched, and let go
// when they end.
func TestHandoffLegacyPods(t *testing.T) {
	ht := newHandoffTest(t)
	aliyun := aliyunPod("aliyun", 4, 1)
	ht.h.UpsertPod(aliyun)
	stray := aliyunPod("stray", 2, -1) // no IDX on a 3-card node: Aliyun gave it no card
	ht.h.UpsertPod(stray)
	// Bound by our extender while the node ran Aliyun's plugin, which
	// admitted it and set ASSIGNED=true: a plugin (re)start would restore
	// a grant from that flag.
	mixed := ht.pod(util.MakePod("mixed").GPUMem(8), map[string][]int{"c0": {2}}, 1)
	mixed = mixed.DeepCopy()
	mixed.Annotations[gpushare.AnnotationAssigned] = "true"
	mixed.Annotations[gpushare.AnnotationIndex] = "2"
	ht.h.DeletePod(mixed.UID)
	ht.h.UpsertPod(mixed)
	// Ours, waiting for kubelet: the same size as the legacy pods.
	ours := ht.pod(util.MakePod("ours").GPUMem(4), map[string][]int{"c0": {1}}, 2)

	ht.kubelet.set(
		KubeletPod{Namespace: "default", Name: "aliyun", Containers: map[string][]string{"c0": aliyunIDs("GPU-0", 3, 4)}},
		KubeletPod{Namespace: "default", Name: "stray", Containers: map[string][]string{"c0": aliyunIDs("GPU-2", 0, 2)}},
		KubeletPod{Namespace: "default", Name: "mixed", Containers: map[string][]string{"c0": aliyunIDs("GPU-1", 8, 8)}},
		KubeletPod{Namespace: "default", Name: "ours", Containers: map[string][]string{"c0": nil}},
	)
	if err := ht.h.AdoptAtStart(ht.ctx); err != nil {
		t.Fatal(err)
	}
	want := Adoption{
		ByCard: map[string][]string{"GPU-1": aliyunIDs("GPU-0", 3, 4), "GPU-2": aliyunIDs("GPU-1", 8, 8)},
		Pods: []LegacyPod{
			{Pod: "default/aliyun", Card: 1, Units: 4},
			{Pod: "default/mixed", Card: 2, Units: 8},
			{Pod: "default/stray", Card: -1, Units: 2},
		},
	}
	if diff := cmp.Diff(want, ht.h.Adoption()); diff != "" {
		t.Errorf("Adoption mismatch (-want +got):\n%s", diff)
	}
	select {
	case <-ht.h.LegacyChanged():
	default:
		t.Error("LegacyChanged did not deliver after legacy pods were found")
	}
	if _, _, ok := ht.h.Grant(mixed.UID, "c0"); ok {
		t.Error("the grant restored from the previous plugin's ASSIGNED=true survived")
	}
	for _, p := range []*corev1.Pod{aliyun, stray, mixed} {
		if ns, _, set := ht.h.Desired(p.UID); ns != "" || set != nil {
			t.Errorf("Desired(%s) = %v: a legacy pod is never patched", p.Name, deref(set))
		}
	}
	if n := ht.h.Waiting(); n != 1 {
		t.Errorf("Waiting() = %d, want 1 (ours only)", n)
	}
	// kubelet admits ours (4 units): it is matched, not a legacy pod of the
	// same size.
	a, _ := ht.admit(4)
	if a.Pod != ours.UID {
		t.Errorf("Allocate matched %s, want ours", a.PodName)
	}

	// The Aliyun pod ends; kubelet lists mixed without its old devices
	// (released), and still lists the stray pod's.
	ht.h.DeletePod(aliyun.UID)
	ht.kubelet.set(
		KubeletPod{Namespace: "default", Name: "stray", Containers: map[string][]string{"c0": aliyunIDs("GPU-2", 0, 2)}},
		KubeletPod{Namespace: "default", Name: "mixed", Containers: map[string][]string{"c0": nil}},
	)
	if _, err := ht.h.Verify(ht.ctx); err != nil {
		t.Fatal(err)
	}
	want = Adoption{ByCard: map[string][]string{}, Pods: []LegacyPod{{Pod: "default/stray", Card: -1, Units: 2}}}
	if diff := cmp.Diff(want, ht.h.Adoption()); diff != "" {
		t.Errorf("Adoption after two legacy pods let go (-want +got):\n%s", diff)
	}
	select {
	case <-ht.h.LegacyChanged():
	default:
		t.Error("LegacyChanged did not deliver after legacy pods ended")
	}
}

// TestHandoffLegacyOnOneCard: Aliyun's plugin gave the only card of a
// one-card node to any pod, annotated or not.
func TestHandoffLegacyOnOneCard(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	k := &fakeKubelet{}
	h := New(Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards[:1], Kubelet: k})
	h.UpsertPod(aliyunPod("stray", 2, -1))
	k.set(KubeletPod{Namespace: "default", Name: "stray", Containers: map[string][]string{"c0": aliyunIDs("GPU-0", 5, 2)}})
	if err := h.AdoptAtStart(ctx); err != nil {
		t.Fatal(err)
	}
	want := Adoption{ByCard: map[string][]string{"GPU-0": aliyunIDs("GPU-0", 5, 2)}, Pods: []LegacyPod{{Pod: "default/stray", Card: 0, Units: 2}}}
	if diff := cmp.Diff(want, h.Adoption()); diff != "" {
		t.Errorf("Adoption mismatch (-want +got):\n%s", diff)
	}
}

func TestAdoptAtStartRefuses(t *testing.T) {
	pause := startupReadPause
	startupReadPause = 10 * time.Millisecond
	t.Cleanup(func() { startupReadPause = pause })
	mib := aliyunPod("mib", 4096, 0)
	mib.Annotations[gpushare.AnnotationDevMem] = "15109"
	tests := []struct {
		name    string
		pods    []*corev1.Pod
		kubelet *fakeKubelet
		wantErr []string // "" parts: no error
	}{
		{
			name: "PodResources down, a pod runs",
			pods: []*corev1.Pod{aliyunPod("running", 4, 0)}, kubelet: &fakeKubelet{err: errors.New("connection refused")},
			wantErr: []string{"node n1", "1 pod(s) (default/running)", "connection refused", "once kubelet's PodResources answers"},
		},
		{
			name: "PodResources down, only pods waiting for this plugin",
			pods: []*corev1.Pod{util.MakePod("w").GPUMem(4).Node("n1").Annotation(gpushare.AnnotationAssigned, "false").
				Allocation(&gpushare.Allocation{Node: "n1", Unit: "GiB", Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, UUID: "GPU-0", Units: 4}}}}}).Obj()},
			kubelet: &fakeKubelet{err: errors.New("connection refused")},
		},
		{
			name: "legacy pods placed in MiB",
			pods: []*corev1.Pod{mib},
			kubelet: &fakeKubelet{pods: []KubeletPod{{Namespace: "default", Name: "mib",
				Containers: map[string][]string{"c0": aliyunIDs("GPU-0", 0, 4096)}}}},
			wantErr: []string{"pod default/mib was placed by Aliyun's gpushare in MiB", "ALIYUN_COM_GPU_MEM_DEV=15109 for card 0, which has 16 GiB", "--memory-unit MiB"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			h := New(Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards, Kubelet: tc.kubelet})
			for _, p := range tc.pods {
				h.UpsertPod(p)
			}
			err := h.AdoptAtStart(ctx)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("AdoptAtStart: %v", err)
				}
				return
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("AdoptAtStart error = %v, want one containing %q", err, w)
				}
			}
		})
	}
}
