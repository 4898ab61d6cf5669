package prepare

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/isolation"
)

// blockingEnforcer is an Enforcer whose Edits, for the cards in block,
// waits until release is closed, as mps mode's Edits waits for a card's
// MPS daemon; entered receives the UUID of each call that waits.
type blockingEnforcer struct {
	block   map[string]bool
	entered chan string
	release chan struct{}

	mu sync.Mutex
	// held is what each RetainMPS was told.
	held [][][]isolation.Share
}

func newBlockingEnforcer(uuids ...string) *blockingEnforcer {
	e := &blockingEnforcer{block: map[string]bool{}, entered: make(chan string, 16), release: make(chan struct{})}
	for _, u := range uuids {
		e.block[u] = true
	}
	return e
}

func (e *blockingEnforcer) Edits(ctx context.Context, shares []isolation.Share) (*isolation.Edits, error) {
	if e.block[shares[0].UUID] {
		e.entered <- shares[0].UUID
		select {
		case <-e.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &isolation.Edits{Mode: gpushare.IsolationMPS, Env: map[string]string{}}, nil
}

func (e *blockingEnforcer) PruneCDI([][]isolation.Limit, time.Duration) (int, error) { return 0, nil }

func (e *blockingEnforcer) RetainMPS(_ context.Context, held [][]isolation.Share, _ time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.held = append(e.held, held)
	return nil
}

// watchdog bounds how long a test waits for something that does not
// depend on the blocked card: it is never reached when the state is right.
const watchdog = 20 * time.Second

// awaitOrRelease waits for done; if the watchdog fires first it releases
// the blocked card (so that the test ends) and fails with why.
func awaitOrRelease(t *testing.T, e *blockingEnforcer, done <-chan error, why string) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(watchdog):
		close(e.release)
		t.Fatal(why)
		return nil
	}
}

// goPrepare prepares c in a goroutine; the channel gets its error.
func goPrepare(s *State, c *resourceapi.ResourceClaim) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := s.Prepare(context.Background(), c)
		done <- err
	}()
	return done
}

// TestPrepareDoesNotWaitForAnotherCardsDaemon: while a claim on gpu-0
// waits for its card's MPS daemon, a claim on gpu-1 is prepared, and one
// that would over-commit gpu-0 together with the waiting claim is refused,
// without waiting for gpu-0's daemon either.
func TestPrepareDoesNotWaitForAnotherCardsDaemon(t *testing.T) {
	s := newTestState(t, t.TempDir(), t.TempDir())
	e := newBlockingEnforcer(testCards()[0].UUID)
	s.enforcer = e

	first := goPrepare(s, claim("slow", result("gpu-0", 12, "s1")))
	<-e.entered // claim slow waits for gpu-0's daemon

	other := goPrepare(s, claim("other", result("gpu-1", 4, "s2")))
	if err := awaitOrRelease(t, e, other, "a claim on gpu-1 waited for gpu-0's MPS daemon"); err != nil {
		t.Fatalf("claim other on gpu-1: %v", err)
	}
	over := goPrepare(s, claim("over", result("gpu-0", 8, "s3")))
	if err := awaitOrRelease(t, e, over, "a claim on gpu-0 waited for gpu-0's MPS daemon before its capacity check"); err == nil {
		t.Error("8 GiB more on gpu-0, whose 12 of 16 GiB a claim being prepared holds, was prepared")
	}
	close(e.release)
	if err := <-first; err != nil {
		t.Fatalf("claim slow: %v", err)
	}
	if diff := cmp.Diff(map[string]int64{"gpu-0": 12288, "gpu-1": 4096}, s.Used()); diff != "" {
		t.Errorf("Used (-want +got):\n%s", diff)
	}
}

// TestPrepareOfOneClaimTwiceAtOnce: a second Prepare of a claim being
// prepared waits for the first and gets its answer; the claim is counted
// once.
func TestPrepareOfOneClaimTwiceAtOnce(t *testing.T) {
	s := newTestState(t, t.TempDir(), t.TempDir())
	e := newBlockingEnforcer(testCards()[0].UUID)
	s.enforcer = e
	done := []<-chan error{goPrepare(s, claim("a", result("gpu-0", 8, "s1"))), goPrepare(s, claim("a", result("gpu-0", 8, "s1")))}
	<-e.entered
	close(e.release)
	for _, d := range done {
		if err := <-d; err != nil {
			t.Fatal(err)
		}
	}
	if diff := cmp.Diff(map[string]int64{"gpu-0": 8192}, s.Used()); diff != "" {
		t.Errorf("Used (-want +got):\n%s", diff)
	}
}

// TestRetainCountsClaimsBeingPrepared: an Unprepare while a claim waits
// for its card's daemon tells mps mode the waiting claim's share too, so
// that the card's default limit is not lowered under it.
func TestRetainCountsClaimsBeingPrepared(t *testing.T) {
	ctx := context.Background()
	s := newTestState(t, t.TempDir(), t.TempDir())
	if _, err := s.Prepare(ctx, claim("done", result("gpu-1", 2, "s0"))); err != nil {
		t.Fatal(err)
	}
	e := newBlockingEnforcer(testCards()[0].UUID)
	s.enforcer = e
	first := goPrepare(s, claim("slow", result("gpu-0", 12, "s1")))
	<-e.entered
	un := make(chan error, 1)
	go func() { un <- s.Unprepare(ctx, "uid-done") }()
	if err := awaitOrRelease(t, e, un, "Unprepare waited for gpu-0's MPS daemon"); err != nil {
		t.Fatal(err)
	}
	close(e.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	want := [][][]isolation.Share{{{{UUID: testCards()[0].UUID, MiB: 12288}}}}
	if diff := cmp.Diff(want, e.held); diff != "" {
		t.Errorf("shares retained by the Unprepare (-want +got):\n%s", diff)
	}
}

// TestRestoreWaitsForTheDaemonsAtOnce: after a restart, Restore asks for
// every prepared claim's isolation at once: one card whose daemon does not
// answer delays the start by one wait, not one per claim.
func TestRestoreWaitsForTheDaemonsAtOnce(t *testing.T) {
	ctx := context.Background()
	dataDir, cdiDir := t.TempDir(), t.TempDir()
	s := newTestState(t, dataDir, cdiDir)
	for _, c := range []string{"a", "b", "c"} {
		if _, err := s.Prepare(ctx, claim(c, result("gpu-0", 4, "s-"+c))); err != nil {
			t.Fatal(err)
		}
	}
	restarted := newTestState(t, dataDir, cdiDir)
	e := newBlockingEnforcer(testCards()[0].UUID)
	restarted.enforcer = e
	done := make(chan error, 1)
	go func() { done <- restarted.Restore(ctx) }()
	for range 3 {
		select {
		case <-e.entered:
		case <-time.After(watchdog):
			close(e.release)
			t.Fatal("Restore waits for one claim's MPS daemon before it asks for the next")
		}
	}
	close(e.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"gpu-0": 12288}, restarted.Used()); diff != "" {
		t.Errorf("Used after Restore (-want +got):\n%s", diff)
	}
}
