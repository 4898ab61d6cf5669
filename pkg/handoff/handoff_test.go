package handoff

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// testCards: two 16 GiB cards and an 80 GiB one.
var testCards = []Card{
	{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "T4"}, Units: 16},
	{Card: gpushare.Card{Index: 1, UUID: "GPU-1", Model: "T4"}, Units: 16},
	{Card: gpushare.Card{Index: 2, UUID: "GPU-2", Model: "A100"}, Units: 80},
}

// fakeKubelet is a PodResources whose answer the test sets.
type fakeKubelet struct {
	mu   sync.Mutex
	pods []KubeletPod
	err  error
	// lists counts List calls.
	lists int
}

func (f *fakeKubelet) List(context.Context) ([]KubeletPod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lists++
	return f.pods, f.err
}

func (f *fakeKubelet) listCalls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

func (f *fakeKubelet) set(pods ...KubeletPod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
}

// handoffTest is a Handoff with a fake kubelet, fake clock, and a model of
// kubelet's free device IDs.
type handoffTest struct {
	t       *testing.T
	ctx     context.Context
	h       *Handoff
	kubelet *fakeKubelet
	clock   *clocktesting.FakePassiveClock
	// used: device IDs kubelet has handed out.
	used map[string]bool
}

func newHandoffTest(t *testing.T) *handoffTest {
	_, ctx := ktesting.NewTestContext(t)
	ht := &handoffTest{t: t, ctx: ctx, kubelet: &fakeKubelet{}, clock: clocktesting.NewFakePassiveClock(time.Unix(1700000000, 0)), used: map[string]bool{}}
	ht.h = New(Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards, Kubelet: ht.kubelet, Clock: ht.clock})
	return ht
}

// pod adds a bound pod whose containers (from w) sit on cards (container
// name -> card indexes), bound at second at.
func (ht *handoffTest) pod(w *util.PodWrapper, cards map[string][]int, at int64) *corev1.Pod {
	ht.t.Helper()
	d, err := gpushare.PodDemand(w.Obj())
	if err != nil {
		ht.t.Fatal(err)
	}
	a := &gpushare.Allocation{Node: "n1", Unit: gpushare.UnitGiB}
	for _, c := range d {
		ca := gpushare.ContainerAllocation{Name: c.Name, Init: c.Init}
		for _, idx := range cards[c.Name] {
			ca.Devices = append(ca.Devices, gpushare.DeviceShare{Index: idx, UUID: testCards[idx].UUID, Units: c.Units})
		}
		a.Containers = append(a.Containers, ca)
	}
	p := w.Node("n1").Allocation(a).Annotation(gpushare.AnnotationAssigned, "false").
		Annotation(gpushare.AnnotationAssumeTime, strconv.FormatInt(at*1e9, 10)).Obj()
	ht.h.UpsertPod(p)
	return p
}

// available returns kubelet's free IDs.
func (ht *handoffTest) available() []string {
	var out []string
	for _, c := range testCards {
		for k := int64(0); k < c.Units; k++ {
			if id := DeviceID(c.UUID, k); !ht.used[id] {
				out = append(out, id)
			}
		}
	}
	return out
}

// take marks ids as handed out by kubelet.
func (ht *handoffTest) take(ids []string) {
	for _, id := range ids {
		ht.used[id] = true
	}
}

// admit plays kubelet for one container: GetPreferredAllocation, then
// Allocate with the preferred IDs.
func (ht *handoffTest) admit(size int, mustInclude ...string) (*Assignment, []string) {
	ht.t.Helper()
	ids, err := ht.h.Prefer(ht.ctx, append(ht.available(), mustInclude...), mustInclude, size)
	if err != nil {
		ht.t.Fatalf("Prefer: %v", err)
	}
	ht.take(ids)
	a, err := ht.h.Allocate(ht.ctx, ids)
	if err != nil {
		ht.t.Fatalf("Allocate: %v", err)
	}
	return a, ids
}

func cardIndexes(shares []gpushare.DeviceShare) []int {
	var out []int
	for _, s := range shares {
		out = append(out, s.Index)
	}
	return out
}

func unitsOn(uuid string, from, n int64) []string {
	var out []string
	for k := from; k < from+n; k++ {
		out = append(out, DeviceID(uuid, k))
	}
	return out
}

func TestHandoffSteersToTheListedPod(t *testing.T) {
	ht := newHandoffTest(t)
	ht.pod(util.MakePod("a").GPUMem(4), map[string][]int{"c0": {0}}, 1)
	b := ht.pod(util.MakePod("b").GPUMem(4), map[string][]int{"c0": {1}}, 2)
	// kubelet is admitting b (the younger pod): PodResources lists it.
	ht.kubelet.set(KubeletPod{Namespace: "default", Name: "b", Containers: map[string][]string{"c0": nil}})
	a, ids := ht.admit(4)
	if a.Pod != b.UID || a.Container != "c0" || a.Relocated {
		t.Fatalf("assignment %+v, want pod b container c0 as annotated", a)
	}
	if diff := cmp.Diff(unitsOn("GPU-1", 0, 4), ids); diff != "" {
		t.Errorf("preferred IDs mismatch (-want +got):\n%s", diff)
	}
	if st := ht.h.Stats(); st.Steered != 1 {
		t.Errorf("stats %+v, want 1 steered", st)
	}
	_, _, set := ht.h.Desired(b.UID)
	if diff := cmp.Diff(map[string]string{gpushare.AnnotationAssigned: "true"}, deref(set)); diff != "" {
		t.Errorf("Desired(b) mismatch (-want +got):\n%s", diff)
	}
}

func deref(m map[string]*string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if v == nil {
			out[k] = "<delete>"
		} else {
			out[k] = *v
		}
	}
	return out
}

// TestHandoffCorrectsAGuess: without kubelet's view the plugin guesses the
// oldest pod; PodResources later shows kubelet gave the IDs to the other
// one, and the annotations follow kubelet.
func TestHandoffCorrectsAGuess(t *testing.T) {
	ht := newHandoffTest(t)
	ht.kubelet.err = errors.New("PodResources down")
	a := ht.pod(util.MakePod("a").GPUMem(4), map[string][]int{"c0": {0}}, 1)
	b := ht.pod(util.MakePod("b").GPUMem(4), map[string][]int{"c0": {1}}, 2)
	got, ids := ht.admit(4) // kubelet admits b; the plugin guesses a (older)
	if got.Pod != a.UID || cmp.Diff([]int{0}, cardIndexes(got.Shares)) != "" {
		t.Fatalf("assignment %+v, want the guess: pod a on card 0", got)
	}
	if _, _, set := ht.h.Desired(a.UID); deref(set)[gpushare.AnnotationAssigned] != "true" {
		t.Fatalf("Desired(a) = %v, want ASSIGNED true after the guess", deref(set))
	}
	ht.h.Patched(a.UID, map[string]*string{gpushare.AnnotationAssigned: ptr("true")})

	// PodResources answers again: kubelet holds the IDs for b.
	ht.kubelet.mu.Lock()
	ht.kubelet.err = nil
	ht.kubelet.mu.Unlock()
	ht.kubelet.set(KubeletPod{Namespace: "default", Name: "b", Containers: map[string][]string{"c0": ids}})
	if _, err := ht.h.Verify(ht.ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := ht.h.Grant(a.UID, "c0"); ok {
		t.Error("a still holds a grant after kubelet showed the IDs are b's")
	}
	shares, confirmed, ok := ht.h.Grant(b.UID, "c0")
	if !ok || !confirmed || cmp.Diff([]int{0}, cardIndexes(shares)) != "" {
		t.Errorf("b's grant = %v confirmed %v ok %v, want card 0 confirmed", shares, confirmed, ok)
	}
	_, _, setA := ht.h.Desired(a.UID)
	if diff := cmp.Diff(map[string]string{gpushare.AnnotationAssigned: "false"}, deref(setA)); diff != "" {
		t.Errorf("Desired(a) mismatch (-want +got):\n%s", diff)
	}
	_, _, setB := ht.h.Desired(b.UID)
	gotB := deref(setB)
	alloc, err := gpushare.ParseAllocation(gotB[gpushare.AnnotationAllocation])
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]gpushare.DeviceShare{{Index: 0, UUID: "GPU-0", Units: 4}}, alloc.Containers[0].Devices); diff != "" {
		t.Errorf("b's repaired allocation mismatch (-want +got):\n%s", diff)
	}
	delete(gotB, gpushare.AnnotationAllocation)
	want := map[string]string{gpushare.AnnotationAssigned: "true", gpushare.AnnotationIndex: "0", gpushare.AnnotationDevMem: "16", gpushare.AnnotationPodMem: "4"}
	if diff := cmp.Diff(want, gotB); diff != "" {
		t.Errorf("Desired(b) mismatch (-want +got):\n%s", diff)
	}
	// a is admitted next and still gets card 0, as annotated: the card has
	// room in kubelet's accounting.
	ht.kubelet.set(KubeletPod{Namespace: "default", Name: "b", Containers: map[string][]string{"c0": ids}},
		KubeletPod{Namespace: "default", Name: "a", Containers: map[string][]string{"c0": nil}})
	got, _ = ht.admit(4)
	if got.Pod != a.UID || got.Relocated || cmp.Diff([]int{0}, cardIndexes(got.Shares)) != "" {
		t.Errorf("assignment %+v, want pod a on card 0", got)
	}
	if st := ht.h.Stats(); st.Corrected != 1 {
		t.Errorf("stats %+v, want 1 corrected", st)
	}
}

func ptr(s string) *string { return &s }

// TestHandoffInitReuse: kubelet hands an init container's IDs on to the
// next container of the same pod, which identifies the pod.
func TestHandoffInitReuse(t *testing.T) {
	ht := newHandoffTest(t)
	ht.kubelet.err = errors.New("PodResources down")
	p := ht.pod(util.MakePod("p").InitGPUMem(4).GPUMem(8), map[string][]int{"i0": {2}, "c0": {2}}, 1)
	ht.pod(util.MakePod("other").GPUMem(8), map[string][]int{"c0": {0}}, 0) // older, same size
	first, initIDs := ht.admit(4)
	if first.Pod != p.UID || first.Container != "i0" {
		t.Fatalf("assignment %+v, want p's init container", first)
	}
	// The app container must include the init container's IDs, which
	// name the pod: PodResources is not asked.
	lists := ht.kubelet.listCalls()
	second, ids := ht.admit(8, initIDs...)
	if n := ht.kubelet.listCalls() - lists; n != 0 {
		t.Errorf("PodResources listed %d times while admitting the reusing container, want 0", n)
	}
	if second.Pod != p.UID || second.Container != "c0" || cmp.Diff([]int{2}, cardIndexes(second.Shares)) != "" {
		t.Fatalf("assignment %+v, want p's c0 on card 2", second)
	}
	for _, id := range initIDs {
		if !strings.Contains(strings.Join(ids, ","), id) {
			t.Errorf("preferred %v lacks the init container's %s", ids, id)
		}
	}
}

func TestHandoffRelocatesWhenTheCardIsFull(t *testing.T) {
	ht := newHandoffTest(t)
	ht.take(unitsOn("GPU-0", 0, 14)) // kubelet's accounting: card 0 has 2 free units
	p := ht.pod(util.MakePod("p").GPUMem(4), map[string][]int{"c0": {0}}, 1)
	a, _ := ht.admit(4)
	if a.Pod != p.UID || !a.Relocated || cmp.Diff([]int{1}, cardIndexes(a.Shares)) != "" {
		t.Fatalf("assignment %+v, want p relocated to card 1 (best fit)", a)
	}
	_, _, set := ht.h.Desired(p.UID)
	if got := deref(set)[gpushare.AnnotationIndex]; got != "1" {
		t.Errorf("repaired %s = %q, want 1", gpushare.AnnotationIndex, got)
	}
}

func TestHandoffErrors(t *testing.T) {
	tests := []struct {
		name    string
		pods    func(ht *handoffTest)
		ids     []string
		wantIs  error
		wantErr string
	}{
		{
			name:    "no waiting pod",
			pods:    func(ht *handoffTest) { ht.pod(util.MakePod("a").GPUMem(2), map[string][]int{"c0": {0}}, 1) },
			ids:     unitsOn("GPU-0", 0, 4),
			wantIs:  ErrNoMatch,
			wantErr: "no container on node n1 waits for 4 GiB; waiting: default/a container c0 (2 units)",
		},
		{
			name:    "IDs on two cards for a one-card container",
			pods:    func(ht *handoffTest) { ht.pod(util.MakePod("a").GPUMem(4), map[string][]int{"c0": {0}}, 1) },
			ids:     append(unitsOn("GPU-0", 0, 2), unitsOn("GPU-1", 0, 2)...),
			wantIs:  ErrNoMatch,
			wantErr: "kubelet allocated 4 units on card 0: 2, card 1: 2 for pod default/a container c0, which needs 4 units on each of 1 cards",
		},
		{
			name:    "unknown card",
			pods:    func(*handoffTest) {},
			ids:     []string{"GPU-9::0"},
			wantIs:  ErrDeviceID,
			wantErr: "GPU-9::0 is not on any card of node n1",
		},
		{
			name:    "pod scheduled without the extender",
			pods:    func(ht *handoffTest) { ht.h.UpsertPod(util.MakePod("raw").GPUMem(4).Node("n1").Obj()) },
			ids:     unitsOn("GPU-0", 0, 4),
			wantIs:  ErrNoMatch,
			wantErr: "pod default/raw cannot be matched: it has no gpushare.io/allocation annotation",
		},
		{
			name: "allocation in another unit",
			pods: func(ht *handoffTest) {
				ht.h.UpsertPod(util.MakePod("mib").GPUMem(4).Node("n1").Allocation(&gpushare.Allocation{Node: "n1", Unit: "MiB",
					Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, Units: 4}}}}}).Obj())
			},
			ids:     unitsOn("GPU-0", 0, 4),
			wantIs:  ErrNoMatch,
			wantErr: "its allocation is in MiB, node n1 reports GiB",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ht := newHandoffTest(t)
			tc.pods(ht)
			_, err := ht.h.Allocate(ht.ctx, tc.ids)
			if !errors.Is(err, tc.wantIs) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Allocate error = %v, want %v containing %q", err, tc.wantIs, tc.wantErr)
			}
		})
	}
}

// TestHandoffRestoredGrants: a restarted plugin trusts ASSIGNED=true until
// kubelet lists the pod without devices.
func TestHandoffRestoredGrants(t *testing.T) {
	ht := newHandoffTest(t)
	w := util.MakePod("p").GPUMem(4)
	p := ht.pod(w, map[string][]int{"c0": {0}}, 1)
	p = p.DeepCopy()
	p.UID = types.UID("uid-p2") // seen for the first time, already assigned
	p.Annotations[gpushare.AnnotationAssigned] = "true"
	ht.h.DeletePod("uid-p")
	ht.h.UpsertPod(p)
	if n := ht.h.Waiting(); n != 0 {
		t.Fatalf("Waiting() = %d after a restart, want 0", n)
	}
	ht.kubelet.set(KubeletPod{Namespace: "default", Name: "p", Containers: map[string][]string{"c0": nil}})
	if _, err := ht.h.Verify(ht.ctx); err != nil {
		t.Fatal(err)
	}
	if n := ht.h.Waiting(); n != 1 {
		t.Fatalf("Waiting() = %d after kubelet listed the pod without devices, want 1", n)
	}
}

// TestHandoffGraceForFreshGrants: PodResources that does not show a grant
// yet does not revoke it within the grace period.
func TestHandoffGraceForFreshGrants(t *testing.T) {
	ht := newHandoffTest(t)
	p := ht.pod(util.MakePod("p").GPUMem(4), map[string][]int{"c0": {0}}, 1)
	ht.kubelet.set(KubeletPod{Namespace: "default", Name: "p", Containers: map[string][]string{"c0": nil}})
	ht.admit(4)
	for _, step := range []struct {
		advance time.Duration
		granted bool
	}{{0, true}, {DefaultGrace - time.Second, true}, {2 * time.Second, false}} {
		ht.clock.SetTime(ht.clock.Now().Add(step.advance))
		if _, err := ht.h.Verify(ht.ctx); err != nil {
			t.Fatal(err)
		}
		if _, _, ok := ht.h.Grant(p.UID, "c0"); ok != step.granted {
			t.Errorf("after %v: granted %v, want %v", step.advance, ok, step.granted)
		}
	}
}

func TestHandoffMultiCard(t *testing.T) {
	ht := newHandoffTest(t)
	p := ht.pod(util.MakePod("p").GPUMem(2).GPUMemCards(16, 2), map[string][]int{"c0": {2}, "c1": {0, 1}}, 1)
	ht.kubelet.set(KubeletPod{Namespace: "default", Name: "p", Containers: map[string][]string{"c0": nil, "c1": nil}})
	a0, _ := ht.admit(2)
	a1, ids := ht.admit(16)
	if a0.Pod != p.UID || a1.Pod != p.UID || cmp.Diff([]int{2}, cardIndexes(a0.Shares)) != "" || cmp.Diff([]int{0, 1}, cardIndexes(a1.Shares)) != "" {
		t.Fatalf("assignments %+v, %+v; want c0 on card 2, c1 on cards 0 and 1", a0, a1)
	}
	if diff := cmp.Diff(append(unitsOn("GPU-0", 0, 8), unitsOn("GPU-1", 0, 8)...), ids); diff != "" {
		t.Errorf("preferred IDs mismatch (-want +got):\n%s", diff)
	}
	if a1.PodUnits != 18 {
		t.Errorf("PodUnits = %d, want 18", a1.PodUnits)
	}
}

func TestHandoffAvailableAndByCard(t *testing.T) {
	h := New(Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards})
	tests := []struct {
		name string
		ids  []string
		skip []string
		want map[string][]string
	}{
		{
			name: "shuffled, by unit number not by string",
			ids:  []string{"GPU-1::10", "GPU-0::3", "GPU-1::2", "GPU-0::0", "GPU-1::9"},
			want: map[string][]string{"GPU-0": {"GPU-0::0", "GPU-0::3"}, "GPU-1": {"GPU-1::2", "GPU-1::9", "GPU-1::10"}},
		},
		{
			name: "must-include IDs, foreign and unadvertised IDs left out",
			ids:  []string{"GPU-0::1", "GPU-0::0", "GPU-9::0", "GPU-0::16", "junk", "GPU-2::79"},
			skip: []string{"GPU-0::1"},
			want: map[string][]string{"GPU-0": {"GPU-0::0"}, "GPU-2": {"GPU-2::79"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			skip := map[string]bool{}
			for _, id := range tc.skip {
				skip[id] = true
			}
			if diff := cmp.Diff(tc.want, h.cards.available(tc.ids, skip)); diff != "" {
				t.Errorf("available mismatch (-want +got):\n%s", diff)
			}
		})
	}
	got, err := h.cards.byCard([]string{"GPU-1::10", "GPU-0::3", "GPU-1::2", "GPU-1::9"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string][]string{"GPU-0": {"GPU-0::3"}, "GPU-1": {"GPU-1::2", "GPU-1::9", "GPU-1::10"}}, got); diff != "" {
		t.Errorf("byCard mismatch (-want +got):\n%s", diff)
	}
}

// TestHandoffReusedCardFull: kubelet must include an init container's IDs
// on a card it has no other free units of (the init container was placed
// there against its annotation). No answer fits the app container on one
// card; Prefer says so instead of slicing past the free list.
func TestHandoffReusedCardFull(t *testing.T) {
	ht := newHandoffTest(t)
	ht.kubelet.err = errors.New("PodResources down")
	ht.take(unitsOn("GPU-1", 0, 16)) // card 1 full in kubelet's accounting
	ht.take(unitsOn("GPU-0", 0, 12)) // card 0: 4 units free
	p := ht.pod(util.MakePod("p").InitGPUMem(4).GPUMem(8), map[string][]int{"i0": {1}, "c0": {1}}, 1)
	first, initIDs := ht.admit(4)
	if first.Pod != p.UID || first.Container != "i0" || cmp.Diff([]int{0}, cardIndexes(first.Shares)) != "" {
		t.Fatalf("assignment %+v, want p's init container relocated to card 0", first)
	}
	_, err := ht.h.Prefer(ht.ctx, append(ht.available(), initIDs...), initIDs, 8)
	want := "pod default/p container c0 needs 8 units on each of 1 cards; kubelet must include 4 units of card 0 " +
		"(reused from the pod's init containers) and has 0 more free there"
	if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Prefer error = %v, want %v containing %q", err, ErrNoMatch, want)
	}
}

// silentAPI is an API server that never answers a read.
type silentAPI struct{}

func (silentAPI) ListNodePods(ctx context.Context, _ string) ([]corev1.Pod, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestHandoffBoundsAPIReads: kubelet admits a pod the informer has not
// delivered and the API server does not answer the plugin's read of the
// node's pods. kubelet calls without a deadline, so the plugin bounds the
// read itself and says in the admission error which read failed.
func TestHandoffBoundsAPIReads(t *testing.T) {
	tests := []struct {
		name string
		call func(ctx context.Context, h *Handoff) error
	}{
		{name: "GetPreferredAllocation", call: func(ctx context.Context, h *Handoff) error {
			_, err := h.Prefer(ctx, unitsOn("GPU-0", 0, 16), nil, 4)
			return err
		}},
		{name: "Allocate", call: func(ctx context.Context, h *Handoff) error {
			_, err := h.Allocate(ctx, unitsOn("GPU-0", 0, 4))
			return err
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, ctx := ktesting.NewTestContext(t)
			kubelet := &fakeKubelet{}
			kubelet.set(KubeletPod{Namespace: "default", Name: "p", Containers: map[string][]string{"c0": nil}})
			h := New(Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards, Kubelet: kubelet, API: silentAPI{}})
			done := make(chan error, 1)
			go func() { done <- tc.call(ctx, h) }()
			select {
			case err := <-done:
				want := "listing the pods of node n1 from the API server: context deadline exceeded"
				if !errors.Is(err, ErrNoMatch) || !strings.Contains(err.Error(), want) {
					t.Errorf("error = %v, want %v containing %q", err, ErrNoMatch, want)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("still waiting on the API server after 30 s")
			}
		})
	}
}
