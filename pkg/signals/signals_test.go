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
