package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRemoveTreeUnmountsFirst: removeTree detaches nested mounts, deepest
// first, before removing, and never deletes through a mount (the files of
// a tmpfs mounted inside are gone with the mount, not removed from under
// it). Needs root to mount.
func TestRemoveTreeUnmountsFirst(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	outer, inner := filepath.Join(dir, "a"), filepath.Join(dir, "a", "x", "b")
	if err := os.MkdirAll(outer, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", outer, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount tmpfs here: %v", err)
	}
	if err := os.MkdirAll(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", inner, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inner, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	mps, err := mountPoints(dir)
	if err != nil || len(mps) != 2 || mps[0] != inner {
		t.Fatalf("mountPoints = %v, %v; want the inner mount first of two", mps, err)
	}
	if err := removeTree(dir); err != nil {
		t.Fatal(err)
	}
	if mps, _ := mountPoints(dir); len(mps) != 0 {
		t.Errorf("mounts stay: %v", mps)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there: %v", dir, err)
	}
}

// TestRemoveEmptyDirs removes empty directories and keeps those with files.
func TestRemoveEmptyDirs(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"s/empty/deeper", "s/full"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "s/full/f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	removeEmptyDirs(filepath.Join(dir, "s"))
	if _, err := os.Stat(filepath.Join(dir, "s/empty")); !os.IsNotExist(err) {
		t.Errorf("s/empty still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "s/full/f")); err != nil {
		t.Errorf("s/full/f removed: %v", err)
	}
}

func TestParseRuntime(t *testing.T) {
	for _, s := range []string{"containerd-1.6", "containerd-2"} {
		if _, err := ParseRuntime(s); err != nil {
			t.Errorf("ParseRuntime(%q) = %v", s, err)
		}
	}
	if _, err := ParseRuntime("docker"); err == nil {
		t.Error("ParseRuntime(docker) = nil, want an error")
	}
}

// TestTakeLock: a second taker waits for the holder and gets the lock
// once it is released; one that finds make node-demo's lock fails at once.
func TestTakeLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	first, err := takeLock(context.Background(), path, "go test", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := takeLock(ctx, path, "second", nil); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "go test") {
		t.Errorf("a second taker while the first holds it: %v, want ErrLocked naming the holder", err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := takeLock(context.Background(), path, "third", nil)
		if err == nil {
			l.Release()
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	first.Release()
	if err := <-got; err != nil {
		t.Errorf("a waiting taker after the release: %v", err)
	}
	demo, err := takeLock(context.Background(), path, demoPurpose+" (supervisor pid 1)", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer demo.Release()
	start := time.Now()
	if _, err := takeLock(context.Background(), path, "go test", nil); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "make node-demo-down") {
		t.Errorf("a taker of the demo's lock: %v, want ErrLocked at once", err)
	}
	if time.Since(start) > time.Second {
		t.Errorf("a taker of the demo's lock waited %s", time.Since(start))
	}
}
