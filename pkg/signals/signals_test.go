package signals

import (
	"context"
	"syscall"
	"testing"
	"time"
)

func TestHangups(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := Hangups(ctx)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no restart after SIGHUP")
	}
	cancel()
	select {
	case <-ch:
		t.Error("received after the context ended")
	case <-time.After(100 * time.Millisecond):
	}
}

func TestHangupsCoalesce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := Hangups(ctx)
	// Several SIGHUPs before anyone receives: the first fills the pending
	// slot, the rest must be dropped, not queued behind it.
	for range 3 {
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		// Let the relay goroutine take each signal off its buffer of one,
		// so none is coalesced by the os/signal buffer instead.
		time.Sleep(50 * time.Millisecond)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("no restart after three SIGHUPs")
	}
	select {
	case <-ch:
		t.Error("three unreceived SIGHUPs gave more than one reception")
	case <-time.After(200 * time.Millisecond):
	}
}
