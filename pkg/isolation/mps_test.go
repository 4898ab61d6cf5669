package isolation

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// envFakeMPSRecord, when set, makes the test binary act as a fake
// nvidia-cuda-mps-control that appends what it is asked to this file.
const envFakeMPSRecord = "GPUSHARE_FAKE_MPS_RECORD"

func TestMain(m *testing.M) {
	if rec := os.Getenv(envFakeMPSRecord); rec != "" {
		os.Exit(fakeMPSControl(rec))
	}
	os.Exit(m.Run())
}

// fakeMPSControl acts as nvidia-cuda-mps-control. With -f it is the
// daemon: it records "start", marks its pipe directory as served, and
// runs until a client sends "quit" (exit 0) or a test drops a "crash"
// file in the pipe directory (exit 1). Without arguments it is a client:
// it records each line of stdin, and fails when no daemon serves the pipe
// directory.
func fakeMPSControl(rec string) int {
	card := os.Getenv(envVisibleDevices)
	pipe := os.Getenv(EnvMPSPipeDir)
	record := func(s string) {
		f, err := os.OpenFile(rec, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			os.Exit(3)
		}
		_, _ = fmt.Fprintf(f, "%s %s\n", card, s)
		_ = f.Close()
	}
	served := filepath.Join(pipe, "control")
	if len(os.Args) > 1 && os.Args[1] == "-f" {
		if os.Getenv(EnvMPSLogDir) == "" {
			return 2
		}
		record("start")
		if err := os.WriteFile(served, nil, 0o600); err != nil {
			return 2
		}
		for {
			time.Sleep(5 * time.Millisecond)
			if _, err := os.Stat(filepath.Join(pipe, "quit")); err == nil {
				_ = os.Remove(filepath.Join(pipe, "quit"))
				_ = os.Remove(served)
				record("exit")
				return 0
			}
			if _, err := os.Stat(filepath.Join(pipe, "crash")); err == nil {
				_ = os.Remove(filepath.Join(pipe, "crash"))
				_ = os.Remove(served)
				record("crash")
				return 1
			}
		}
	}
	if _, err := os.Stat(served); err != nil {
		fmt.Fprintln(os.Stderr, "no MPS daemon")
		return 1
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		record(sc.Text())
		if sc.Text() == "quit" {
			_ = os.WriteFile(filepath.Join(pipe, "quit"), nil, 0o600)
		}
	}
	return 0
}

// recorded returns the lines of rec.
func recorded(t *testing.T, rec string) []string {
	t.Helper()
	b, err := os.ReadFile(rec)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// waitRecorded waits until rec holds want.
func waitRecorded(t *testing.T, rec string, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := recorded(t, rec)
		if cmp.Equal(want, got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("recorded commands (-want +got):\n%s", cmp.Diff(want, got))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestMPSLifecycle runs the manager against the fake control binary (this
// test binary re-executed): a daemon per card in use started with the
// card in exclusive-process mode, the default limit raised to the largest
// share, a crash restarted and reported with its limit sent again, and
// "quit" to every daemon at Stop.
func TestMPSLifecycle(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rec := filepath.Join(t.TempDir(), "record")
	t.Setenv(envFakeMPSRecord, rec)
	devs, err := gpu.ParseFakeGPUs("2xTesla-V100:16GiB", "n1")
	if err != nil {
		t.Fatal(err)
	}
	a, b := devs[0].UUID, devs[1].UUID
	fake := gpu.NewFake(devs)
	fake.SetDriver(gpu.FakeDriver{Driver: gpu.Driver{Version: "550.54.15"}, MPS: true})
	var mu sync.Mutex
	var restarts []string
	_, ctx := ktesting.NewTestContext(t)
	m := NewMPS(ctx, MPSConfig{Control: exe, Root: filepath.Join(t.TempDir(), "mps"), GPUs: fake, OnRestart: func(uuid string, err error) {
		mu.Lock()
		defer mu.Unlock()
		restarts = append(restarts, uuid)
	}})

	if err := m.Ensure(ctx, a, 4096); err != nil {
		t.Fatal(err)
	}
	if err := m.Ensure(ctx, a, 2048); err != nil { // smaller: nothing sent
		t.Fatal(err)
	}
	if err := m.Ensure(ctx, a, 8192); err != nil { // larger: raised
		t.Fatal(err)
	}
	waitRecorded(t, rec, []string{
		a + " start",
		a + " set_default_device_pinned_mem_limit 0 4096M",
		a + " set_default_device_pinned_mem_limit 0 8192M",
	})
	for _, u := range []string{a, b} {
		f, _ := fake.Features(u)
		want := gpu.ComputeDefault
		if u == a {
			want = gpu.ComputeExclusiveProcess
		}
		if f.ComputeMode != want {
			t.Errorf("compute mode of %s = %v, want %v", u, f.ComputeMode, want)
		}
	}

	// A crash: the daemon comes back with the largest limit.
	pipe, _ := m.Dirs(a)
	if err := os.WriteFile(filepath.Join(pipe, "crash"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, rec, []string{
		a + " start",
		a + " set_default_device_pinned_mem_limit 0 4096M",
		a + " set_default_device_pinned_mem_limit 0 8192M",
		a + " crash",
		a + " start",
		a + " set_default_device_pinned_mem_limit 0 8192M",
	})
	mu.Lock()
	if diff := cmp.Diff([]string{a}, restarts); diff != "" {
		t.Errorf("restarts reported (-want +got):\n%s", diff)
	}
	mu.Unlock()

	// The second card in use gets its own daemon.
	if err := m.Ensure(ctx, b, 1024); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	got := recorded(t, rec)
	var gotA, gotB []string
	for _, l := range got {
		if strings.HasPrefix(l, a) {
			gotA = append(gotA, l)
		} else {
			gotB = append(gotB, l)
		}
	}
	if diff := cmp.Diff([]string{a + " quit", a + " exit"}, gotA[len(gotA)-2:]); diff != "" {
		t.Errorf("card a at Stop (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{b + " start", b + " set_default_device_pinned_mem_limit 0 1024M", b + " quit", b + " exit"}, gotB); diff != "" {
		t.Errorf("card b (-want +got):\n%s", diff)
	}
	if err := m.Ensure(context.Background(), b, 1024); err == nil {
		t.Error("Ensure after Stop: want an error")
	}
}

// TestMPSControlMissing: a daemon that cannot start makes Ensure fail
// within its bound instead of hanging Allocate.
func TestMPSControlMissing(t *testing.T) {
	devs, _ := gpu.ParseFakeGPUs("1xTesla-V100:16GiB", "n1")
	_, tctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(tctx, 2*time.Second)
	defer cancel()
	m := NewMPS(ctx, MPSConfig{Control: filepath.Join(t.TempDir(), "absent"), Root: t.TempDir(), GPUs: gpu.NewFake(devs)})
	defer func() { _ = m.Stop(context.Background()) }()
	if err := m.Ensure(ctx, devs[0].UUID, 1024); err == nil {
		t.Fatal("Ensure without a control binary: want an error")
	}
}
