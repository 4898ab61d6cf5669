package nodepods

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

var cards = []devices.Card{
	{Card: gpushare.Card{Index: 0, UUID: "GPU-0"}, CapacityMiB: 16384},
	{Card: gpushare.Card{Index: 1, UUID: "GPU-1"}, CapacityMiB: 16384},
}

// pod is a pod on node with an allocation annotation a (none when nil).
func pod(name, node string, phase corev1.PodPhase, a *gpushare.Allocation) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID(name)},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: phase},
	}
	if a != nil {
		v, err := a.Encode()
		if err != nil {
			panic(err)
		}
		p.Annotations = map[string]string{gpushare.AnnotationAllocation: v}
	}
	return p
}

// alloc is an allocation on node-a in unit of one container per share,
// each {index, uuid, units}.
func alloc(unit string, shares ...gpushare.DeviceShare) *gpushare.Allocation {
	a := &gpushare.Allocation{Node: "node-a", Unit: unit}
	for i, s := range shares {
		a.Containers = append(a.Containers, gpushare.ContainerAllocation{Name: "c" + string(rune('0'+i)), Devices: []gpushare.DeviceShare{s}})
	}
	return a
}

func TestHeldBy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pod     *corev1.Pod
		want    map[string]int64
		wantErr string
	}{
		{name: "no annotation", pod: pod("p", "node-a", corev1.PodRunning, nil)},
		{name: "two cards in GiB", pod: pod("p", "node-a", corev1.PodRunning, alloc(gpushare.UnitGiB,
			gpushare.DeviceShare{Index: 0, UUID: "GPU-0", Units: 4}, gpushare.DeviceShare{Index: 1, UUID: "GPU-1", Units: 2})),
			want: map[string]int64{"GPU-0": 4096, "GPU-1": 2048}},
		{name: "two containers on one card", pod: pod("p", "node-a", corev1.PodPending, alloc(gpushare.UnitGiB,
			gpushare.DeviceShare{Index: 1, Units: 4}, gpushare.DeviceShare{Index: 1, Units: 2})),
			want: map[string]int64{"GPU-1": 6144}},
		{name: "MiB", pod: pod("p", "node-a", corev1.PodRunning, alloc(gpushare.UnitMiB, gpushare.DeviceShare{Index: 0, Units: 1500})),
			want: map[string]int64{"GPU-0": 1500}},
		{name: "the UUID wins over the index", pod: pod("p", "node-a", corev1.PodRunning, alloc(gpushare.UnitGiB, gpushare.DeviceShare{Index: 0, UUID: "GPU-1", Units: 3})),
			want: map[string]int64{"GPU-1": 3072}},
		{name: "an unknown UUID falls back to the index", pod: pod("p", "node-a", corev1.PodRunning, alloc(gpushare.UnitGiB, gpushare.DeviceShare{Index: 0, UUID: "GPU-gone", Units: 3})),
			want: map[string]int64{"GPU-0": 3072}},
		{name: "succeeded", pod: pod("p", "node-a", corev1.PodSucceeded, alloc(gpushare.UnitGiB, gpushare.DeviceShare{Index: 0, Units: 4}))},
		{name: "failed", pod: pod("p", "node-a", corev1.PodFailed, alloc(gpushare.UnitGiB, gpushare.DeviceShare{Index: 0, Units: 4}))},
		{name: "another node's allocation", pod: pod("p", "node-b", corev1.PodRunning, alloc(gpushare.UnitGiB, gpushare.DeviceShare{Index: 0, Units: 4})),
			wantErr: "names node node-a"},
		{name: "a card the node does not have", pod: pod("p", "node-a", corev1.PodRunning, alloc(gpushare.UnitGiB, gpushare.DeviceShare{Index: 5, Units: 4})),
			wantErr: "names card 5"},
		{name: "unparsable", pod: func() *corev1.Pod {
			p := pod("p", "node-a", corev1.PodRunning, nil)
			p.Annotations = map[string]string{gpushare.AnnotationAllocation: "{"}
			return p
		}(), wantErr: "decoding allocation"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := tc.pod.Spec.NodeName
			got, err := HeldBy(tc.pod, node, cards)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b map[string]int64) bool { return len(a) == 0 && len(b) == 0 || cmp.Equal(a, b) })); diff != "" {
				t.Errorf("HeldBy (-want +got):\n%s", diff)
			}
		})
	}
}

func TestClaimsOf(t *testing.T) {
	p := pod("p", "node-a", corev1.PodRunning, nil)
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "a", ResourceClaimName: ptr.To("shared")}, {Name: "b", ResourceClaimTemplateName: ptr.To("t")}}
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: "b", ResourceClaimName: ptr.To("p-b-x7k2")}}
	if diff := cmp.Diff([]string{"shared", "p-b-x7k2"}, ClaimsOf(p)); diff != "" {
		t.Errorf("ClaimsOf (-want +got):\n%s", diff)
	}
	p.Status.Phase = corev1.PodSucceeded
	if got := ClaimsOf(p); got != nil {
		t.Errorf("ClaimsOf a finished pod = %v, want none", got)
	}
}

// TestWatcher: from a fake clientset's pods, the watcher sums what the
// device plugin's pods on its node hold, tells each change, forgets a pod
// that finished or is deleted, ignores other nodes' pods, and knows the
// claims the node's pods use.
func TestWatcher(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	user := pod("user", "node-a", corev1.PodRunning, nil)
	user.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("mine")}}
	client := fake.NewClientset(
		pod("a", "node-a", corev1.PodRunning, alloc(gpushare.UnitGiB, gpushare.DeviceShare{Index: 0, Units: 4})),
		pod("b", "node-a", corev1.PodRunning, alloc(gpushare.UnitGiB, gpushare.DeviceShare{Index: 0, Units: 8}, gpushare.DeviceShare{Index: 1, Units: 2})),
		pod("elsewhere", "node-b", corev1.PodRunning, alloc(gpushare.UnitGiB, gpushare.DeviceShare{Index: 0, Units: 16})),
		user,
	)
	w := New("node-a", cards)
	var mu sync.Mutex
	var told []map[string]int64
	if err := w.Start(ctx, client, func(h map[string]int64) { mu.Lock(); told = append(told, h); mu.Unlock() }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"GPU-0": 12288, "GPU-1": 2048}, w.Held()); diff != "" {
		t.Errorf("Held after the sync (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"default/a", "default/b"}, w.HeldPods()); diff != "" {
		t.Errorf("HeldPods (-want +got):\n%s", diff)
	}
	if !w.ClaimInUse("default", "mine") || w.ClaimInUse("default", "other") || w.ClaimInUse("kube-system", "mine") {
		t.Error("ClaimInUse: want default/mine only")
	}

	b := pod("b", "node-a", corev1.PodSucceeded, alloc(gpushare.UnitGiB, gpushare.DeviceShare{Index: 0, Units: 8}, gpushare.DeviceShare{Index: 1, Units: 2}))
	if _, err := client.CoreV1().Pods("default").UpdateStatus(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, w, map[string]int64{"GPU-0": 4096})
	if err := client.CoreV1().Pods("default").Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, w, map[string]int64{})
	mu.Lock()
	defer mu.Unlock()
	// The informer lists a and b in either order: after both, each change.
	if len(told) != 4 {
		t.Fatalf("changes told: %v, want 4", told)
	}
	if diff := cmp.Diff([]map[string]int64{{"GPU-0": 12288, "GPU-1": 2048}, {"GPU-0": 4096}, {}}, told[1:]); diff != "" {
		t.Errorf("changes told once both pods were listed (-want +got):\n%s", diff)
	}
}

func waitHeld(t *testing.T, w *Watcher, want map[string]int64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return cmp.Equal(want, w.Held()), nil
	})
	if err != nil {
		t.Fatalf("Held = %v, want %v", w.Held(), want)
	}
}
