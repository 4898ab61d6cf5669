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
	"github.com/gpushare/gpushare/test/util"
)

// fakeAPI is a PodAPI whose pod changes under the binder: each patch at a
// stale resourceVersion is a Conflict.
type fakeAPI struct {
	pod *corev1.Pod
	// conflicts: how many patches to refuse before accepting.
	conflicts int
	// bindErr is returned by Bind.
	bindErr error
	calls   []string // verbs in order, for assertions
}

func (f *fakeAPI) GetPod(_ context.Context, _, _ string) (*corev1.Pod, error) {
	f.calls = append(f.calls, "get")
	return f.pod.DeepCopy(), nil
}

func (f *fakeAPI) PatchAnnotations(_ context.Context, _, name, rv string, set map[string]*string) error {
	f.calls = append(f.calls, "patch@"+rv)
	if rv != "" && rv != f.pod.ResourceVersion {
		return apierrors.NewConflict(corev1.Resource("pods"), name, errors.New("stale"))
	}
	if f.conflicts > 0 {
		f.conflicts--
		f.pod.ResourceVersion += "+" // someone else wrote the pod
		return apierrors.NewConflict(corev1.Resource("pods"), name, errors.New("changed meanwhile"))
	}
	if f.pod.Annotations == nil {
		f.pod.Annotations = map[string]string{}
	}
	for k, v := range set {
		if v == nil {
			delete(f.pod.Annotations, k)
		} else {
			f.pod.Annotations[k] = *v
		}
	}
	return nil
}

func (f *fakeAPI) Bind(_ context.Context, _, _ string, _ types.UID, node string) error {
	f.calls = append(f.calls, "bind")
	if f.bindErr != nil {
		return f.bindErr
	}
	f.pod.Spec.NodeName = node
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

func TestBindRetriesOnConflict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pod := util.MakePod("p").GPUMem(4).Obj()
	pod.ResourceVersion = "1"
	api := &fakeAPI{pod: pod, conflicts: 2}
	b, c := newBinderFixture(t, api)
	if err := b.Bind(ctx, "default", "p", pod.UID, "n1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"get", "patch@1", "get", "patch@1+", "get", "patch@1++", "bind"}
	if diff := cmp.Diff(want, api.calls); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	if v, _ := c.Inspect("n1"); v[0].Used != 4 {
		t.Errorf("used = %d, want 4", v[0].Used)
	}
}

func TestBindGivesUpAfterRetries(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pod := util.MakePod("p").GPUMem(4).Obj()
	pod.ResourceVersion = "1"
	api := &fakeAPI{pod: pod, conflicts: 100}
	b, c := newBinderFixture(t, api)
	err := b.Bind(ctx, "default", "p", pod.UID, "n1")
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "writing allocation annotations on pod default/p") {
		t.Fatalf("Bind() error = %v, want a wrapped Conflict", err)
	}
	if v, _ := c.Inspect("n1"); v[0].Used != 0 {
		t.Errorf("used = %d after a failed bind, want 0", v[0].Used)
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

func TestBindConflictButAlreadyBoundHereSucceeds(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pod := util.MakePod("p").GPUMem(4).Obj()
	api := &fakeAPI{pod: pod}
	// The Binding was created by an earlier attempt whose reply was lost.
	api.bindErr = apierrors.NewConflict(corev1.Resource("pods/binding"), "p", errors.New("already assigned"))
	b, c := newBinderFixture(t, api)
	b.api = &bindThenFail{fakeAPI: api}
	if err := b.Bind(ctx, "default", "p", pod.UID, "n1"); err != nil {
		t.Fatalf("Bind() = %v, want success for a pod already on n1", err)
	}
	if v, _ := c.Inspect("n1"); v[0].Used != 4 {
		t.Errorf("used = %d, want 4", v[0].Used)
	}
}

// bindThenFail binds the pod and then reports a conflict, as when a retried
// Binding meets the first one.
type bindThenFail struct{ *fakeAPI }

func (b *bindThenFail) Bind(_ context.Context, _, _ string, _ types.UID, node string) error {
	b.pod.Spec.NodeName = node
	return b.bindErr
}
