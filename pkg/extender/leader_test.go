package extender

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/test/util"
)

// fakeLeader is a Leadership and a Fencer set by the test.
type fakeLeader struct {
	serving, ready bool
	// refuse: Fence's error once the first fences calls have passed.
	refuse error
	fences int
	// deadline given to each fenced write.
	deadline time.Time
}

func (l *fakeLeader) Serving() bool { return l.serving }
func (l *fakeLeader) Ready() bool   { return l.ready }
func (l *fakeLeader) Fence(ctx context.Context) (context.Context, func(), error) {
	if l.fences--; l.fences < 0 && l.refuse != nil {
		return nil, nil, l.refuse
	}
	fenced, cancel := context.WithDeadline(ctx, l.deadline)
	return fenced, cancel, nil
}

// TestFollowerAnswers503: a replica that does not serve answers every verb
// 503 with Retry-After, so kube-scheduler reports an extender error and
// retries the pod; its /readyz follows Ready.
func TestFollowerAnswers503(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		leader               *fakeLeader
		wantVerbs, wantReady int
	}{
		{name: "single replica", wantVerbs: http.StatusOK, wantReady: http.StatusOK},
		{name: "standalone follower", leader: &fakeLeader{}, wantVerbs: http.StatusServiceUnavailable, wantReady: http.StatusServiceUnavailable},
		{name: "sidecar of a scheduler that does not lead", leader: &fakeLeader{ready: true}, wantVerbs: http.StatusServiceUnavailable, wantReady: http.StatusOK},
		{name: "leader", leader: &fakeLeader{serving: true, ready: true}, wantVerbs: http.StatusOK, wantReady: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.leader != nil {
				f.configure(t, func(c *HandlersConfig) { c.Leader = tc.leader })
			}
			if status, _ := f.do(t, "GET", "/readyz", ""); status != tc.wantReady {
				t.Errorf("/readyz = %d, want %d", status, tc.wantReady)
			}
			for _, verb := range []string{"filter", "prioritize"} {
				rec := httptest.NewRecorder()
				f.handler.ServeHTTP(rec, httptest.NewRequest("POST", Prefix+"/"+verb, strings.NewReader(extenderArgs(t, util.MakePod("p").GPUMem(1).Obj(), "mixed"))))
				if rec.Code != tc.wantVerbs {
					t.Errorf("%s = %d %s, want %d", verb, rec.Code, rec.Body.String(), tc.wantVerbs)
				}
				if rec.Code == http.StatusServiceUnavailable && (rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "not the leader")) {
					t.Errorf("%s refused without Retry-After or reason: %q %s", verb, rec.Header().Get("Retry-After"), rec.Body.String())
				}
			}
		})
	}
}

// TestBindFenced: each Binding write runs under the fence's deadline; a
// refused fence sends no Binding and releases the cards, unless an earlier
// Binding of the pod may still be applied, which keeps them.
func TestBindFenced(t *testing.T) {
	errLost := errors.New("lease lost")
	for _, tc := range []struct {
		name      string
		leader    *fakeLeader
		bindErrs  []error
		wantCalls []string
		wantErr   string
		wantUsed  int64
	}{
		{name: "leader binds", leader: &fakeLeader{fences: 1}, wantCalls: []string{"get", "bind"}, wantUsed: 4},
		{name: "refused: nothing sent, cards released", leader: &fakeLeader{refuse: errLost}, wantCalls: []string{"get"}, wantErr: "lease lost"},
		{name: "refused after a Binding that may be applied: cards kept", leader: &fakeLeader{fences: 1, refuse: errLost},
			bindErrs: []error{context.DeadlineExceeded}, wantCalls: []string{"get", "bind", "get"}, wantErr: "may yet be applied", wantUsed: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			pod := util.MakePod("p").GPUMem(4).Obj()
			api := &fakeAPI{pod: pod, bindErrs: tc.bindErrs}
			tc.leader.deadline = time.Now().Add(time.Hour)
			b, c := newFencedBinder(t, api, tc.leader)
			err := b.Bind(ctx, "default", "p", pod.UID, "n1")
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Bind() = %v, want %q", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantCalls, api.calls); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			if v, _ := c.Inspect("n1"); v[0].Used != tc.wantUsed {
				t.Errorf("used = %d, want %d", v[0].Used, tc.wantUsed)
			}
		})
	}
}

// TestBindGetsTheFencedDeadline: the write's context ends at the fence's
// deadline, not the bind's own (BindTimeout).
func TestBindGetsTheFencedDeadline(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	pod := util.MakePod("p").GPUMem(4).Obj()
	want := time.Now().Add(3 * time.Second)
	var got time.Time
	b, _ := newFencedBinder(t, deadlineAPI{PodAPI: &fakeAPI{pod: pod}, got: &got}, &fakeLeader{fences: 1, deadline: want})
	if err := b.Bind(ctx, "default", "p", pod.UID, "n1"); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(want) {
		t.Errorf("Binding deadline %s, want the fence's %s", got, want)
	}
}

// deadlineAPI records the deadline of the Binding write.
type deadlineAPI struct {
	PodAPI
	got *time.Time
}

func (d deadlineAPI) Bind(ctx context.Context, namespace, name string, uid types.UID, node string, ann map[string]string) error {
	*d.got, _ = ctx.Deadline()
	return d.PodAPI.Bind(ctx, namespace, name, uid, node, ann)
}
