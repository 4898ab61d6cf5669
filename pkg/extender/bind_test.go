package extender

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// fakeAPI is a PodAPI over one pod that applies a Binding as the API
// server does (node and annotations in one update) after refusing the
// first conflicts attempts with a Conflict.
type fakeAPI struct {
	pod       *corev1.Pod
	conflicts int
	// onConflict, if set, changes the pod when a conflict is returned.
	onConflict func(*corev1.Pod)
	// bindErr, if set, is returned by every Bind.
	bindErr error
	calls   []string // verbs in order, for assertions
}

func (f *fakeAPI) GetPod(_ context.Context, _, _ string) (*corev1.Pod, error) {
	f.calls = append(f.calls, "get")
	return f.pod.DeepCopy(), nil
}

func (f *fakeAPI) Bind(_ context.Context, _, name string, uid types.UID, node string, ann map[string]string) error {
	f.calls = append(f.calls, "bind")
	if f.bindErr != nil {
		return f.bindErr
	}
	if f.conflicts > 0 || uid != f.pod.UID || f.pod.Spec.NodeName != "" {
		f.conflicts--
		if f.onConflict != nil {
			f.onConflict(f.pod)
		}
		return apierrors.NewConflict(corev1.Resource("pods/binding"), name, errors.New("conflict"))
	}
	f.pod.Spec.NodeName = node
	if f.pod.Annotations == nil {
		f.pod.Annotations = map[string]string{}
	}
	for k, v := range ann {
		f.pod.Annotations[k] = v
	}
	return nil
}

// noCache misses every pod, so the binder reads from the API.
type noCache struct{}

func (noCache) Pod(_, _ string) (*cache.PodInfo, bool) { return nil, false }

func newBinderFixture(t *testing.T, api *fakeAPI) (*Binder, *cache.Cache) {
	t.Helper()
	c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16).Obj()); err != nil {
		t.Fatal(err)
	}
	return NewBinder(c, api, noCache{}, clocktesting.NewFakeClock(time.Unix(1, 0))), c
}

func TestBindIsOneWrite(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pod := util.MakePod("p").GPUMem(4).Obj()
	api := &fakeAPI{pod: pod}
	b, c := newBinderFixture(t, api)
	if err := b.Bind(ctx, "default", "p", pod.UID, "n1"); err != nil {
		t.Fatal(err)
	}
	// One read (the informer cache missed) and one write.
	if diff := cmp.Diff([]string{"get", "bind"}, api.calls); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	if api.pod.Spec.NodeName != "n1" || api.pod.Annotations[gpushare.AnnotationAllocation] == "" || api.pod.Annotations[gpushare.AnnotationAssumeTime] != "1000000000" {
		t.Errorf("pod after bind: node %q annotations %v", api.pod.Spec.NodeName, api.pod.Annotations)
	}
	if v, _ := c.Inspect("n1"); v[0].Used != 4 {
		t.Errorf("used = %d, want 4", v[0].Used)
	}
}

func TestBindRetriesOnConflict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pod := util.MakePod("p").GPUMem(4).Obj()
	api := &fakeAPI{pod: pod, conflicts: 2}
	b, _ := newBinderFixture(t, api)
	if err := b.Bind(ctx, "default", "p", pod.UID, "n1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"get", "bind", "get", "bind", "get", "bind"}, api.calls); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
}

func TestBindConflicts(t *testing.T) {
	tests := []struct {
		name       string
		conflicts  int
		onConflict func(*corev1.Pod)
		wantErr    string
		wantUsed   int64
		// wantBinds: Binding attempts; giving up takes one and
		// maxConflictRetries (5) retries.
		wantBinds int
	}{
		{
			name:      "gives up after retries",
			conflicts: 100,
			wantErr:   "binding pod default/p to node n1: Operation cannot be fulfilled",
			wantBinds: 6,
		},
		{
			name:       "bound elsewhere meanwhile",
			conflicts:  1,
			onConflict: func(p *corev1.Pod) { p.Spec.NodeName = "n2" },
			wantErr:    "pod default/p was bound to node n2 meanwhile: pod already bound to another node",
			wantBinds:  1,
		},
		{
			name:       "re-created meanwhile",
			conflicts:  1,
			onConflict: func(p *corev1.Pod) { p.UID = "other" },
			wantErr:    "pod default/p was re-created while binding",
			wantBinds:  1,
		},
		{
			name:       "an earlier attempt bound it here",
			conflicts:  1,
			onConflict: func(p *corev1.Pod) { p.Spec.NodeName = "n1" },
			wantUsed:   4,
			wantBinds:  1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			pod := util.MakePod("p").GPUMem(4).Obj()
			api := &fakeAPI{pod: pod, conflicts: tc.conflicts, onConflict: tc.onConflict}
			b, c := newBinderFixture(t, api)
			err := b.Bind(ctx, "default", "p", pod.UID, "n1")
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Bind() error = %v, want %q", err, tc.wantErr)
			}
			if v, _ := c.Inspect("n1"); v[0].Used != tc.wantUsed {
				t.Errorf("used = %d, want %d", v[0].Used, tc.wantUsed)
			}
			// Each refused Binding is followed by a re-read of the pod.
			var want []string
			for range tc.wantBinds {
				want = append(want, "bind", "get")
			}
			if diff := cmp.Diff(want, api.calls[1:]); diff != "" { // after the first read
				t.Errorf("API calls after the first read (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBindRefusesReplacedPod(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pod := util.MakePod("p").GPUMem(4).UID("new-uid").Obj()
	b, _ := newBinderFixture(t, &fakeAPI{pod: pod})
	err := b.Bind(ctx, "default", "p", "old-uid", "n1")
	if err == nil || !strings.Contains(err.Error(), "deleted and re-created") {
		t.Errorf("Bind() error = %v, want the UID mismatch explained", err)
	}
}
