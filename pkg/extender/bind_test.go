package extender

import (
	"context"
	"errors"
	"slices"
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
	"github.com/gpushare/gpushare/pkg/kubeinfo"
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
	// bindErrs are returned by the first Binds, one each; an entry of
	// errLostAnswer makes the Binding and then answers a timeout, as when the
	// answer is lost after the API server committed it.
	bindErrs []error
	// getErrs are returned by the GETs after the first, one each.
	getErrs []error
	calls   []string // verbs in order, for assertions
}

// errLostAnswer in fakeAPI.bindErrs: the Binding is made, its answer lost.
var errLostAnswer = errors.New("lost answer")

func (f *fakeAPI) GetPod(ctx context.Context, _, _ string) (*corev1.Pod, error) {
	f.calls = append(f.calls, "get")
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(f.calls) > 1 && len(f.getErrs) > 0 {
		err := f.getErrs[0]
		f.getErrs = f.getErrs[1:]
		if err != nil {
			return nil, err
		}
	}
	return f.pod.DeepCopy(), nil
}

func (f *fakeAPI) Bind(ctx context.Context, ns, name string, uid types.UID, node string, ann map[string]string) error {
	f.calls = append(f.calls, "bind")
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(f.bindErrs) > 0 {
		err := f.bindErrs[0]
		f.bindErrs = f.bindErrs[1:]
		if errors.Is(err, errLostAnswer) {
			f.bindErrs = nil
			if err := f.Bind(ctx, ns, name, uid, node, ann); err != nil {
				return err
			}
			f.calls = f.calls[:len(f.calls)-1]
			return apierrors.NewTimeoutError("request did not complete within the allowed duration", 0)
		}
		if err != nil {
			return err
		}
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

func (noCache) Pod(_, _ string) (*kubeinfo.PodInfo, bool) { return nil, false }

func newBinderFixture(t *testing.T, api *fakeAPI) (*Binder, *cache.Cache) {
	t.Helper()
	return newFencedBinder(t, api, nil)
}

// newFencedBinder is newBinderFixture over any api, with fence (nil: none).
func newFencedBinder(t *testing.T, api PodAPI, fence Fencer) (*Binder, *cache.Cache) {
	t.Helper()
	c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16).Obj()); err != nil {
		t.Fatal(err)
	}
	b, err := NewBinder(BinderConfig{Cache: c, API: api, Pods: noCache{}, Clock: clocktesting.NewFakeClock(time.Unix(1, 0)), Fence: fence})
	if err != nil {
		t.Fatal(err)
	}
	return b, c
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
		wantResult string
		wantUsed   int64
		// wantBinds: Binding attempts; giving up takes one and
		// maxConflictRetries (5) retries.
		wantBinds int
	}{
		{
			name:       "gives up after retries",
			conflicts:  100,
			wantErr:    "binding pod default/p to node n1: Operation cannot be fulfilled",
			wantResult: BindConflict,
			wantBinds:  6,
		},
		{
			name:       "bound elsewhere meanwhile",
			conflicts:  1,
			onConflict: func(p *corev1.Pod) { p.Spec.NodeName = "n2" },
			wantErr:    "pod default/p was bound to node n2 meanwhile: pod already bound to another node",
			wantResult: BindConflict,
			wantBinds:  1,
		},
		{
			name:       "re-created meanwhile",
			conflicts:  1,
			onConflict: func(p *corev1.Pod) { p.UID = "other" },
			wantErr:    "pod default/p was re-created while binding",
			wantResult: BindConflict,
			wantBinds:  1,
		},
		{
			name:       "an earlier attempt bound it here",
			conflicts:  1,
			onConflict: func(p *corev1.Pod) { p.Spec.NodeName = "n1" },
			wantResult: BindBound,
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
			if got := BindResultOf(err); got != tc.wantResult {
				t.Errorf("BindResultOf = %q, want %q", got, tc.wantResult)
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
	if got := BindResultOf(err); got != BindConflict {
		t.Errorf("BindResultOf = %q, want %q", got, BindConflict)
	}
}

// TestBindAmbiguousAnswers: an error that does not say the Binding was
// refused (a timeout, a server error, no answer) may follow a Binding the
// API server made. The binder then reads the pod back, and releases the
// cards only when the Binding is known not to exist; while it cannot know,
// they stay held (until the informer shows the pod or the assumption
// expires), so no other pod gets them.
func TestBindAmbiguousAnswers(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("etcd leader changed")
	tests := []struct {
		name      string
		bindErrs  []error
		getErrs   []error
		wantErr   string
		wantRes   string
		wantUsed  int64
		wantCalls []string // after the first read
	}{
		{
			name:      "answer lost, Binding made: read back, bound",
			bindErrs:  []error{errLostAnswer},
			wantRes:   BindBound,
			wantUsed:  4,
			wantCalls: []string{"bind", "get"},
		},
		{
			name:      "answer lost and the read back fails: cards stay held",
			bindErrs:  []error{errLostAnswer},
			getErrs:   []error{unavailable, unavailable, unavailable},
			wantErr:   "stay held",
			wantRes:   BindUnknown,
			wantUsed:  4,
			wantCalls: []string{"bind", "get", "get", "get"},
		},
		{
			name:      "server error, not made: read back, bound again",
			bindErrs:  []error{unavailable},
			wantRes:   BindBound,
			wantUsed:  4,
			wantCalls: []string{"bind", "get", "bind"},
		},
		{
			name:      "refused: released at once",
			bindErrs:  []error{apierrors.NewForbidden(corev1.Resource("pods/binding"), "p", errors.New("no"))},
			wantErr:   "forbidden",
			wantRes:   BindError,
			wantUsed:  0,
			wantCalls: []string{"bind"},
		},
		{
			name:      "pod deleted: released",
			bindErrs:  []error{apierrors.NewNotFound(corev1.Resource("pods"), "p")},
			wantErr:   "not found",
			wantRes:   BindConflict,
			wantUsed:  0,
			wantCalls: []string{"bind"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			pod := util.MakePod("p").GPUMem(4).Obj()
			api := &fakeAPI{pod: pod, bindErrs: tc.bindErrs, getErrs: tc.getErrs}
			b, c := newBinderFixture(t, api)
			err := b.Bind(ctx, "default", "p", pod.UID, "n1")
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Bind() error = %v, want %q", err, tc.wantErr)
			}
			if got := BindResultOf(err); got != tc.wantRes {
				t.Errorf("BindResultOf = %q, want %q", got, tc.wantRes)
			}
			if v, _ := c.Inspect("n1"); v[0].Used != tc.wantUsed {
				t.Errorf("used = %d, want %d", v[0].Used, tc.wantUsed)
			}
			if diff := cmp.Diff(tc.wantCalls, api.calls[1:]); diff != "" {
				t.Errorf("API calls after the first read (-want +got):\n%s", diff)
			}
			if tc.wantUsed > 0 {
				// The held card goes to no other pod.
				other := kubeinfo.NewPodInfo(util.MakePod("q").GPUMem(16).Obj())
				if _, err := c.Assume(context.Background(), other, "n1"); err == nil {
					t.Error("another pod was given the card the bind may hold")
				}
			}
		})
	}
}

// TestBindOutlivesTheSchedulersRequest: kube-scheduler cancels its bind
// request at its httpTimeout; the bind goes on under its own deadline
// rather than stopping between the API server's commit and the cache.
func TestBindOutlivesTheSchedulersRequest(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	pod := util.MakePod("p").GPUMem(4).Obj()
	api := &fakeAPI{pod: pod}
	b, c := newBinderFixture(t, api)
	if err := b.Bind(ctx, "default", "p", pod.UID, "n1"); err != nil {
		t.Fatalf("Bind with the request's context cancelled: %v", err)
	}
	if api.pod.Spec.NodeName != "n1" {
		t.Errorf("pod not bound")
	}
	if v, _ := c.Inspect("n1"); v[0].Used != 4 {
		t.Errorf("used = %d, want 4", v[0].Used)
	}
}

// TestBindRetrySettlesAnUnknownOutcome: a bind whose outcome is unknown
// (its Binding request got no answer and the pod could not be read back)
// leaves its cards held; kube-scheduler's next try is offered that node
// alone, and binding there again settles it as bound with the same cards,
// whether the first Binding was made or not, at once rather than when the
// assumption expires.
func TestBindRetrySettlesAnUnknownOutcome(t *testing.T) {
	unavailable := apierrors.NewServiceUnavailable("etcd leader changed")
	timeout := apierrors.NewTimeoutError("request did not complete within the allowed duration", 0)
	for _, tc := range []struct {
		name  string
		first error // the first Binding's answer
	}{
		{"first Binding made, its answer lost", errLostAnswer},
		{"first Binding never made", timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			pod := util.MakePod("p").GPUMem(4).Obj()
			api := &fakeAPI{pod: pod, bindErrs: []error{tc.first}, getErrs: []error{unavailable, unavailable, unavailable}}
			b, c := newBinderFixture(t, api)
			if err := c.SetNode(util.MakeNode("n2").Cards("T4", 16).Obj()); err != nil {
				t.Fatal(err)
			}
			err := b.Bind(ctx, "default", "p", pod.UID, "n1")
			if got := BindResultOf(err); got != BindUnknown {
				t.Fatalf("first bind: result %q (%v), want %q", got, err, BindUnknown)
			}
			held, _ := c.Inspect("n1")

			// The scheduler tries the pod again, pending as it last saw it.
			info := kubeinfo.NewPodInfo(pod)
			best, failed, err := c.FilterBest(ctx, info, []string{"n2", "n1"})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff([]string{"n1"}, best); diff != "" {
				t.Errorf("filter after the unknown outcome (-want +got):\n%s", diff)
			}
			if _, ok := failed["n2"]; !ok {
				t.Errorf("filter did not say why n2 is left out: %v", failed)
			}
			if err := b.Bind(ctx, "default", "p", pod.UID, "n1"); err != nil {
				t.Fatalf("second bind on n1: %v", err)
			}
			if api.pod.Spec.NodeName != "n1" {
				t.Errorf("pod bound to %q, want n1", api.pod.Spec.NodeName)
			}
			now, _ := c.Inspect("n1")
			if diff := cmp.Diff(held[0].Cards[0].Pods[0].Units, now[0].Cards[0].Pods[0].Units); diff != "" || now[0].Used != 4 {
				t.Errorf("n1's cards after the second bind: %+v, want the first bind's 4 GiB", now[0].Cards)
			}
			if got := now[0].Cards[0].Pods[0].State; got != string(cache.StateBound) {
				t.Errorf("p is %q after the second bind, want %q", got, cache.StateBound)
			}
			// Settled: the pod is no longer sent to n1 alone.
			if fit, _, err := c.Filter(ctx, info, []string{"n2", "n1"}); err != nil || !slices.Contains(fit, "n2") {
				t.Errorf("filter after the bind settled: %v, %v; want n2 offered", fit, err)
			}
		})
	}
}

// TestBindRacingTheDelete: the pod's delete reaches the cache after the
// bind read the pod: the bind holds nothing and sends no Binding.
func TestBindRacingTheDelete(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pod := util.MakePod("p").GPUMem(4).Obj()
	api := &fakeAPI{pod: pod}
	b, c := newBinderFixture(t, api)
	c.DeletePod(pod.UID)
	err := b.Bind(ctx, "default", "p", pod.UID, "n1")
	if !errors.Is(err, cache.ErrPodGone) || BindResultOf(err) != BindConflict {
		t.Fatalf("Bind after the delete: %v (result %q), want ErrPodGone, %q", err, BindResultOf(err), BindConflict)
	}
	if diff := cmp.Diff([]string{"get"}, api.calls); diff != "" {
		t.Errorf("API calls (-want +got):\n%s", diff)
	}
	if v, _ := c.Inspect("n1"); v[0].Used != 0 {
		t.Errorf("n1 holds %d GiB after the refused bind, want 0", v[0].Used)
	}
}
