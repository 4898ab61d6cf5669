package leader

import (
	"context"
	"errors"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// caughtUp waits until g serves or fails.
func waitServing(t *testing.T, g *Gate) {
	t.Helper()
	for range 500 {
		g.mu.Lock()
		ok := g.caughtUp
		g.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("the catch-up never finished")
}

func TestFence(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	catchUps := 0
	g := NewGate(func(context.Context) (int, error) { catchUps++; return 0, nil }, 10*time.Second, true, clk)

	if _, _, err := g.Fence(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Fence before leading = %v, want ErrNotLeader", err)
	}
	if g.Ready() {
		t.Error("a follower reports ready")
	}
	g.renewal(clk.Now())
	g.begin(ctx)
	waitServing(t, g)
	if !g.Serving() || !g.Ready() || catchUps != 1 {
		t.Fatalf("after the catch-up: serving %v, ready %v, catch-ups %d", g.Serving(), g.Ready(), catchUps)
	}
	fenced, done, err := g.Fence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if dl, _ := fenced.Deadline(); !dl.Equal(clk.Now().Add(10 * time.Second)) {
		t.Errorf("a Binding's deadline is %s, want the renewal plus the renew deadline %s", dl, clk.Now().Add(10*time.Second))
	}
	// The term ends: the write in flight is cancelled.
	g.end(klogFrom(ctx))
	select {
	case <-fenced.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a Binding in flight was not cancelled when the term ended")
	}
	done()
	if _, _, err := g.Fence(ctx); !errors.Is(err, ErrNotLeader) {
		t.Errorf("Fence after the term = %v, want ErrNotLeader", err)
	}

	// A new term: a lease renewed too long ago refuses writes.
	g.begin(ctx)
	waitServing(t, g)
	clk.Step(9*time.Second + 600*time.Millisecond)
	if _, _, err := g.Fence(ctx); !errors.Is(err, ErrLeaseExpiring) {
		t.Errorf("Fence 9.6 s after the renewal = %v, want ErrLeaseExpiring", err)
	}
	clk.Step(time.Second)
	if g.Serving() {
		t.Error("serving past the renew deadline")
	}
	g.renewal(clk.Now())
	if !g.Serving() || catchUps != 2 {
		t.Errorf("renewed: serving %v, catch-ups %d (want one per term)", g.Serving(), catchUps)
	}
}

func TestCatchUpGatesServing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	release := make(chan struct{})
	g := NewGate(func(ctx context.Context) (int, error) { <-release; return 3, nil }, 10*time.Second, true, nil)
	g.renewal(time.Now())
	g.begin(ctx)
	if g.Serving() {
		t.Fatal("serving before the catch-up finished")
	}
	if _, _, err := g.Fence(ctx); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Fence during the catch-up = %v, want ErrNotLeader", err)
	}
	close(release)
	waitServing(t, g)
	if !g.Serving() {
		t.Error("not serving after the catch-up")
	}
}

func TestFollow(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	catchUps := 0
	g := NewGate(func(context.Context) (int, error) { catchUps++; return 0, nil }, 10*time.Second, false, clk)
	f := &follower{gate: g, identity: "sched-a", logger: klogFrom(ctx), ctx: ctx}
	lease := func(holder string, transitions int32) *coordinationv1.Lease {
		return &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseTransitions: ptr.To(transitions),
			RenewTime: &metav1.MicroTime{Time: clk.Now()}}}
	}
	if !g.Ready() {
		t.Error("a sidecar must report ready whoever leads")
	}
	for _, s := range []struct {
		name         string
		lease        *coordinationv1.Lease
		wantServing  bool
		wantCatchUps int
	}{
		{name: "another scheduler leads", lease: lease("sched-b_1234", 0)},
		{name: "a name that only starts like ours", lease: lease("sched-ab_1234", 1)},
		{name: "ours", lease: lease("sched-a_5678", 2), wantServing: true, wantCatchUps: 1},
		{name: "renewed: same term", lease: lease("sched-a_5678", 2), wantServing: true, wantCatchUps: 1},
		{name: "lost and taken back between two events: a new term", lease: lease("sched-a_9999", 4), wantServing: true, wantCatchUps: 2},
		{name: "taken over", lease: lease("sched-b_1234", 5), wantCatchUps: 2},
		{name: "deleted", lease: nil, wantCatchUps: 2},
	} {
		f.observe(s.lease)
		if s.wantServing {
			waitServing(t, g)
		}
		if g.Serving() != s.wantServing || catchUps != s.wantCatchUps {
			t.Errorf("%s: serving %v, catch-ups %d; want %v, %d", s.name, g.Serving(), catchUps, s.wantServing, s.wantCatchUps)
		}
	}
}

func klogFrom(ctx context.Context) klog.Logger { return klog.FromContext(ctx) }
