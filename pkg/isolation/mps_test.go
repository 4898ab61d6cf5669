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
		switch sc.Text() {
		case "quit":
			_ = os.WriteFile(filepath.Join(pipe, "quit"), nil, 0o600)
		case "get_server_list":
			// The PIDs of the MPS servers a test made up, one a line.
			b, _ := os.ReadFile(filepath.Join(pipe, "servers"))
			_, _ = os.Stdout.Write(b)
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
// card in exclusive-process mode, the default limit lowered to the
// smallest share, a crash restarted and reported with its limit sent
// again, and "quit" to every daemon at Stop.
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
	if err := m.Ensure(ctx, a, 2048); err != nil { // smaller: lowered
		t.Fatal(err)
	}
	if err := m.Ensure(ctx, a, 8192); err != nil { // larger: nothing sent
		t.Fatal(err)
	}
	started := []string{
		a + " start",
		a + " set_default_device_pinned_mem_limit 0 4096M",
		a + " get_server_list",
		a + " set_default_device_pinned_mem_limit 0 2048M",
		a + " get_server_list",
	}
	waitRecorded(t, rec, started)
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

	// A crash: the daemon comes back with the smallest share's limit.
	pipe, _ := m.Dirs(a)
	if err := os.WriteFile(filepath.Join(pipe, "crash"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, rec, append(started,
		a+" crash",
		a+" start",
		a+" set_default_device_pinned_mem_limit 0 2048M",
		a+" get_server_list",
	))
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
	if diff := cmp.Diff([]string{b + " start", b + " set_default_device_pinned_mem_limit 0 1024M", b + " get_server_list", b + " quit", b + " exit"}, gotB); diff != "" {
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

// TestMPSDefaultLimitIsSmallestShare: a card's default pinned limit (what
// a process that drops CUDA_MPS_PINNED_DEVICE_MEM_LIMIT gets) follows the
// smallest share the card serves, down as shares come and up as they go,
// and is MPSFloorMiB, not the whole card, when the card serves none;
// shares added within Retain's minAge are spared; running MPS servers get
// the new limit too.
func TestMPSDefaultLimitIsSmallestShare(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	devs, err := gpu.ParseFakeGPUs("1xTesla-V100:16GiB", "n1")
	if err != nil {
		t.Fatal(err)
	}
	uuid := devs[0].UUID
	// h drives one manager; ops act on it in order.
	type h struct {
		m   *MPS
		ctx context.Context
		now time.Time
	}
	ensure := func(mib int64) func(*testing.T, *h) {
		return func(t *testing.T, x *h) {
			if err := x.m.Ensure(x.ctx, uuid, mib); err != nil {
				t.Fatal(err)
			}
		}
	}
	retain := func(minAge time.Duration, mibs ...int64) func(*testing.T, *h) {
		return func(t *testing.T, x *h) {
			if err := x.m.Retain(x.ctx, map[string][]int64{uuid: mibs}, minAge); err != nil {
				t.Fatal(err)
			}
		}
	}
	advance := func(d time.Duration) func(*testing.T, *h) {
		return func(_ *testing.T, x *h) { x.now = x.now.Add(d) }
	}
	tests := []struct {
		name string
		// servers are the PIDs of running MPS servers get_server_list
		// reports.
		servers string
		ops     []func(*testing.T, *h)
		// want are the limits set, in order: "<MiB>" on the control
		// daemon, "<PID>:<MiB>" on a server.
		want []string
	}{
		{name: "a smaller share lowers it, a larger one leaves it",
			ops:  []func(*testing.T, *h){ensure(4096), ensure(2048), ensure(8192)},
			want: []string{"4096", "2048"}},
		{name: "the smallest share leaving raises it to the next, on the running server too",
			servers: "4242\n",
			ops:     []func(*testing.T, *h){ensure(4096), ensure(2048), retain(0, 4096)},
			want:    []string{"4096", "4242:4096", "2048", "4242:2048", "4096", "4242:4096"}},
		{name: "no share held: the floor, not the card",
			ops:  []func(*testing.T, *h){ensure(4096), retain(0)},
			want: []string{"4096", "1"}},
		{name: "a held share Ensure never saw (a restored grant) lowers it",
			ops:  []func(*testing.T, *h){ensure(8192), retain(0, 8192, 1024)},
			want: []string{"8192", "1024"}},
		{name: "a share younger than minAge is spared, then dropped",
			ops:  []func(*testing.T, *h){ensure(4096), advance(30 * time.Second), retain(time.Minute), advance(time.Minute), retain(time.Minute)},
			want: []string{"4096", "1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := filepath.Join(t.TempDir(), "record")
			t.Setenv(envFakeMPSRecord, rec)
			_, ctx := ktesting.NewTestContext(t)
			x := &h{ctx: ctx, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			x.m = NewMPS(ctx, MPSConfig{Control: exe, Root: filepath.Join(t.TempDir(), "mps"), GPUs: gpu.NewFake(devs),
				Now: func() time.Time { return x.now }})
			pipe, _ := x.m.Dirs(uuid)
			if err := os.MkdirAll(pipe, 0o750); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(pipe, "servers"), []byte(tc.servers), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, op := range tc.ops {
				op(t, x)
			}
			if err := x.m.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range recorded(t, rec) {
				f := strings.Fields(strings.TrimPrefix(l, uuid+" "))
				switch {
				case len(f) == 3 && f[0] == "set_default_device_pinned_mem_limit":
					got = append(got, strings.TrimSuffix(f[2], "M"))
				case len(f) == 4 && f[0] == "set_device_pinned_mem_limit":
					got = append(got, f[1]+":"+strings.TrimSuffix(f[3], "M"))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("limits set (-want +got):\n%s", diff)
			}
		})
	}
}
