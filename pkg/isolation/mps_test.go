package isolation

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// envFakeMPSRecord names the file fakeMPSControl appends what it is asked
// to.
const envFakeMPSRecord = "GPUSHARE_FAKE_MPS_RECORD"

// fakeMPSControl acts as nvidia-cuda-mps-control (a shell script: it is
// run for every command, and a shell starts far faster than a test binary
// built with -race). With -f it is the daemon: it records "start", marks
// its pipe directory as served, and runs until a client sends "quit"
// (exit 0) or a test drops a "crash" file in the pipe directory (exit 1);
// with GPUSHARE_FAKE_MPS_FAIL_START set it prints that and exits 1 at
// once, as the real daemon does with a pipe directory too long for its
// sockets (it prints nothing then).
// Without arguments it is a client: it fails when no daemon serves the
// pipe directory, records each line of stdin, and answers get_server_list
// with the contents of the pipe directory's "servers" file (none when
// absent). Each record line is "<card UUID> <what>".
const fakeMPSControl = `#!/bin/sh
rec() { echo "$CUDA_VISIBLE_DEVICES $1" >> "$GPUSHARE_FAKE_MPS_RECORD"; }
p="$CUDA_MPS_PIPE_DIRECTORY"
if [ "$1" = "-f" ]; then
  [ -n "$CUDA_MPS_LOG_DIRECTORY" ] || exit 2
  if [ -n "$GPUSHARE_FAKE_MPS_FAIL_START" ]; then echo "$GPUSHARE_FAKE_MPS_FAIL_START"; exit 1; fi
  rec start
  : > "$p/control"
  while :; do
    sleep 0.01
    if [ -e "$p/quit" ]; then rm -f "$p/quit" "$p/control"; rec exit; exit 0; fi
    if [ -e "$p/crash" ]; then rm -f "$p/crash" "$p/control"; rec crash; exit 1; fi
  done
fi
[ -e "$p/control" ] || { echo "no MPS daemon" >&2; exit 1; }
while read -r line; do
  rec "$line"
  case "$line" in
  quit) : > "$p/quit" ;;
  get_server_list) [ -e "$p/servers" ] && cat "$p/servers" ;;
  esac
done
exit 0
`

// writeFakeMPSControl writes fakeMPSControl to a test directory and
// returns its path.
func writeFakeMPSControl(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nvidia-cuda-mps-control")
	if err := os.WriteFile(path, []byte(fakeMPSControl), 0o700); err != nil { //nolint:gosec // a test script
		t.Fatal(err)
	}
	return path
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

// startDaemons runs the daemons' side over root with fakeMPSControl until
// the returned stop, which fails the test on a Stop error.
func startDaemons(ctx context.Context, t *testing.T, root string, onRestart func(string, error)) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	d := NewMPSDaemons(ctx, MPSDaemonsConfig{Control: writeFakeMPSControl(t), Root: root, Poll: 10 * time.Millisecond, OnRestart: onRestart})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitStatus waits until card uuid's status under root says mib.
func waitStatus(t *testing.T, root, uuid string, mib int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, ok, err := readMPSLimit(filepath.Join(root, uuid, mpsStatusFile), mpsStatusFresh)
		if err != nil {
			t.Fatal(err)
		}
		if ok && got == mib {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("status of %s: %d MiB (present: %v), want %d", uuid, got, ok, mib)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mpsTest returns the record file of fakeMPSControl (set in the
// environment), an MPS root, and two fake cards.
func mpsTest(t *testing.T) (rec, root string, devs []gpu.Device) {
	t.Helper()
	rec = filepath.Join(t.TempDir(), "record")
	t.Setenv(envFakeMPSRecord, rec)
	devs, err := gpu.ParseFakeGPUs("2xTesla-V100:16GiB", "n1")
	if err != nil {
		t.Fatal(err)
	}
	return rec, filepath.Join(t.TempDir(), "mps"), devs
}

// TestMPSLifecycle runs both sides against fakeMPSControl: a daemon per
// card in use started with the card in exclusive-process mode, the
// default limit raised to the largest share, a crash restarted and
// reported with its limit sent again, and "quit" to every daemon when the
// daemons' side stops.
func TestMPSLifecycle(t *testing.T) {
	rec, root, devs := mpsTest(t)
	a, b := devs[0].UUID, devs[1].UUID
	fake := gpu.NewFake(devs)
	fake.SetDriver(gpu.FakeDriver{Driver: gpu.Driver{Version: "550.54.15"}, MPS: true})
	var mu sync.Mutex
	var restarts []string
	_, ctx := ktesting.NewTestContext(t)
	stop := startDaemons(ctx, t, root, func(uuid string, _ error) {
		mu.Lock()
		defer mu.Unlock()
		restarts = append(restarts, uuid)
	})
	m := NewMPS(MPSConfig{Root: root, GPUs: fake})

	if err := m.Ensure(ctx, a, 4096); err != nil {
		t.Fatal(err)
	}
	if err := m.Ensure(ctx, a, 2048); err != nil { // smaller: nothing sent
		t.Fatal(err)
	}
	if err := m.Ensure(ctx, a, 8192); err != nil { // larger: raised
		t.Fatal(err)
	}
	started := []string{
		a + " start",
		a + " set_default_device_pinned_mem_limit 0 4096M",
		a + " get_server_list",
		a + " set_default_device_pinned_mem_limit 0 8192M",
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

	// A crash: the daemon comes back with the largest share's limit.
	pipe, _ := m.Dirs(a)
	if err := os.WriteFile(filepath.Join(pipe, "crash"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, rec, slices.Concat(started, []string{
		a + " crash",
		a + " start",
		a + " set_default_device_pinned_mem_limit 0 8192M",
		a + " get_server_list",
	}))
	mu.Lock()
	if diff := cmp.Diff([]string{a}, restarts); diff != "" {
		t.Errorf("restarts reported (-want +got):\n%s", diff)
	}
	mu.Unlock()

	// The second card in use gets its own daemon.
	if err := m.Ensure(ctx, b, 1024); err != nil {
		t.Fatal(err)
	}
	stop()
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
}

// TestMPSDaemonsOutliveThePlugin: the daemons run apart from the plugin's
// side. A plugin restart (a new MPS on the same root) leaves the running
// daemon alone and goes on using it; a restart of the daemons' side (a
// new MPSDaemons on the same root) brings back the daemon of every card
// with a desired state at once, with its limit, before the plugin asks
// anything, and none for a card never used; a plugin restarted with no
// share held on such a card brings its limit to the floor.
func TestMPSDaemonsOutliveThePlugin(t *testing.T) {
	rec, root, devs := mpsTest(t)
	a := devs[0].UUID
	_, ctx := ktesting.NewTestContext(t)
	stop := startDaemons(ctx, t, root, nil)
	if err := NewMPS(MPSConfig{Root: root, GPUs: gpu.NewFake(devs)}).Ensure(ctx, a, 4096); err != nil {
		t.Fatal(err)
	}
	first := []string{a + " start", a + " set_default_device_pinned_mem_limit 0 4096M", a + " get_server_list"}
	waitRecorded(t, rec, first)

	// The plugin restarts: its new side knows no share until it is told,
	// and the daemon goes on serving.
	m := NewMPS(MPSConfig{Root: root, GPUs: gpu.NewFake(devs)})
	if err := m.Ensure(ctx, a, 2048); err != nil {
		t.Fatal(err)
	}
	second := slices.Concat(first, []string{a + " set_default_device_pinned_mem_limit 0 2048M", a + " get_server_list"})
	waitRecorded(t, rec, second)

	// The daemons' side restarts: the card's daemon is back with its
	// limit before any Ensure.
	stop()
	third := slices.Concat(second, []string{a + " quit", a + " exit"})
	waitRecorded(t, rec, third)
	startDaemons(ctx, t, root, nil)
	waitRecorded(t, rec, slices.Concat(third, []string{a + " start", a + " set_default_device_pinned_mem_limit 0 2048M", a + " get_server_list"}))
	waitStatus(t, root, a, 2048)

	// The plugin restarts again and its first Retain finds no share held
	// on the card: its limit goes to the floor, though this plugin never
	// asked for the card.
	if err := NewMPS(MPSConfig{Root: root, GPUs: gpu.NewFake(devs)}).Retain(ctx, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, root, a, MPSFloorMiB)
}

// TestMPSEnsureNeedsALiveDaemonSide: Ensure does not trust a status the
// daemons' side stopped refreshing (it was killed, and its daemons with
// it), nor wait forever: it fails within ReadyWait, naming the card and
// the container to look at.
func TestMPSEnsureNeedsALiveDaemonSide(t *testing.T) {
	devs, _ := gpu.ParseFakeGPUs("1xTesla-V100:16GiB", "n1")
	uuid := devs[0].UUID
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, uuid), 0o750); err != nil {
		t.Fatal(err)
	}
	status := filepath.Join(root, uuid, mpsStatusFile)
	if err := writeMPSLimit(status, 1); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Minute)
	if err := os.Chtimes(status, old, old); err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	m := NewMPS(MPSConfig{Root: root, GPUs: gpu.NewFake(devs), ReadyWait: 200 * time.Millisecond})
	err := m.Ensure(ctx, uuid, 1024)
	if err == nil || !strings.Contains(err.Error(), "is gpushare's mps-daemons container running on this node?") {
		t.Fatalf("Ensure with a stale status: %v, want an error naming the mps-daemons container", err)
	}
	if got, ok, _ := readMPSLimit(filepath.Join(root, uuid, mpsDesiredFile), 0); !ok || got != 1024 {
		t.Errorf("desired state = %d MiB (present: %v), want 1024: the daemons' side starts it when it comes", got, ok)
	}
}

// TestMPSControlMissing: a daemon that cannot start makes Ensure fail
// within its bound instead of hanging Allocate.
func TestMPSControlMissing(t *testing.T) {
	devs, _ := gpu.ParseFakeGPUs("1xTesla-V100:16GiB", "n1")
	_, ctx := ktesting.NewTestContext(t)
	root := t.TempDir()
	d := NewMPSDaemons(ctx, MPSDaemonsConfig{Control: filepath.Join(t.TempDir(), "absent"), Root: root, Poll: 10 * time.Millisecond})
	go func() { _ = d.Run(ctx) }()
	defer func() { _ = d.Stop(context.Background()) }()
	m := NewMPS(MPSConfig{Root: root, GPUs: gpu.NewFake(devs), ReadyWait: 2 * time.Second})
	if err := m.Ensure(ctx, devs[0].UUID, 1024); err == nil {
		t.Fatal("Ensure without a control binary: want an error")
	}
}

// TestMPSDefaultLimitIsLargestShare: a card's default pinned limit (what
// a process that drops CUDA_MPS_PINNED_DEVICE_MEM_LIMIT gets, and the most
// a client's own limit can reach: MPS only lowers it per client) follows
// the largest share the card serves, up as shares come and down as they go,
// and is MPSFloorMiB, not the whole card, when the card serves none;
// shares added within Retain's minAge are spared; running MPS servers get
// the new limit too.
func TestMPSDefaultLimitIsLargestShare(t *testing.T) {
	devs, err := gpu.ParseFakeGPUs("1xTesla-V100:16GiB", "n1")
	if err != nil {
		t.Fatal(err)
	}
	uuid := devs[0].UUID
	// h drives one plugin side; ops act on it in order.
	type h struct {
		m    *MPS
		ctx  context.Context
		root string
		now  time.Time
	}
	ensure := func(mib int64) func(*testing.T, *h) {
		return func(t *testing.T, x *h) {
			if err := x.m.Ensure(x.ctx, uuid, mib); err != nil {
				t.Fatal(err)
			}
		}
	}
	// retain reports mibs held and waits for the limit it leads to.
	retain := func(minAge time.Duration, want int64, mibs ...int64) func(*testing.T, *h) {
		return func(t *testing.T, x *h) {
			if err := x.m.Retain(x.ctx, map[string][]int64{uuid: mibs}, minAge); err != nil {
				t.Fatal(err)
			}
			waitStatus(t, x.root, uuid, want)
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
		{name: "a larger share raises it, a smaller one leaves it",
			ops:  []func(*testing.T, *h){ensure(4096), ensure(2048), ensure(8192)},
			want: []string{"4096", "8192"}},
		{name: "the largest share leaving lowers it to the next, on the running server too",
			servers: "4242\n",
			ops:     []func(*testing.T, *h){ensure(2048), ensure(4096), retain(0, 2048, 2048)},
			want:    []string{"2048", "4242:2048", "4096", "4242:4096", "2048", "4242:2048"}},
		{name: "no share held: the floor, not the card",
			ops:  []func(*testing.T, *h){ensure(4096), retain(0, 1)},
			want: []string{"4096", "1"}},
		{name: "a held share Ensure never saw (a restored grant) raises it",
			ops:  []func(*testing.T, *h){ensure(1024), retain(0, 8192, 1024, 8192)},
			want: []string{"1024", "8192"}},
		{name: "a share younger than minAge is spared, then dropped",
			ops:  []func(*testing.T, *h){ensure(4096), advance(30 * time.Second), retain(time.Minute, 4096), advance(time.Minute), retain(time.Minute, 1)},
			want: []string{"4096", "1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := filepath.Join(t.TempDir(), "record")
			t.Setenv(envFakeMPSRecord, rec)
			_, ctx := ktesting.NewTestContext(t)
			x := &h{ctx: ctx, root: filepath.Join(t.TempDir(), "mps"), now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			stop := startDaemons(ctx, t, x.root, nil)
			x.m = NewMPS(MPSConfig{Root: x.root, GPUs: gpu.NewFake(devs), Now: func() time.Time { return x.now }})
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
			stop()
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

// TestMPSDaemonExitingAtOnce: a daemon that exits as it starts is
// restarted and reported with the end of what it printed (the real one
// logs to its standard output in the foreground).
func TestMPSDaemonExitingAtOnce(t *testing.T) {
	_, root, devs := mpsTest(t)
	t.Setenv("GPUSHARE_FAKE_MPS_FAIL_START", "Cannot open the control socket")
	errs := make(chan error, 16)
	_, ctx := ktesting.NewTestContext(t)
	stop := startDaemons(ctx, t, root, func(_ string, err error) {
		select {
		case errs <- err:
		default:
		}
	})
	defer stop()
	dir := filepath.Join(root, devs[0].UUID)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := writeMPSLimit(filepath.Join(dir, mpsDesiredFile), 1024); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "exited: exit status 1") || !strings.Contains(err.Error(), "Cannot open the control socket") {
			t.Errorf("restart reported with %v; want the exit status and the daemon's output", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no restart reported in 30 s")
	}
}

func TestTailBuffer(t *testing.T) {
	for _, tc := range []struct {
		writes []string
		want   string
	}{
		{writes: nil, want: ""},
		{writes: []string{"abc"}, want: "abc"},
		{writes: []string{"abc", "defg"}, want: "bcdefg"},
		{writes: []string{"0123456789"}, want: "456789"},
	} {
		b := &tailBuffer{max: 6}
		for _, w := range tc.writes {
			if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write(%q) = %d, %v", w, n, err)
			}
		}
		if got := b.String(); got != tc.want {
			t.Errorf("after %q: %q, want %q", tc.writes, got, tc.want)
		}
	}
}
