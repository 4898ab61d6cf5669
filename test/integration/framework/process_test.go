package framework

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestLastLines(t *testing.T) {
	tests := []struct {
		name string
		in   string
		n    int
		want string
	}{
		{name: "empty", in: "", n: 3, want: ""},
		{name: "fewer lines than n", in: "a\nb\n", n: 3, want: "a\nb"},
		{name: "exactly n", in: "a\nb\nc", n: 3, want: "a\nb\nc"},
		{name: "more lines than n", in: "a\nb\nc\nd\n\n", n: 2, want: "c\nd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LastLines(tt.in, tt.n); got != tt.want {
				t.Errorf("LastLines(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

func TestTailMissingFile(t *testing.T) {
	if got := Tail(filepath.Join(t.TempDir(), "none.log"), 5); got != "(no log)" {
		t.Errorf("Tail of a missing file = %q, want (no log)", got)
	}
}

// TestProcStop starts a shell waiting on a forked child: Stop's SIGTERM to
// the process group ends it (the grace period is an hour, so SIGKILL never
// comes into play), and Stop and Kill on an exited process are no-ops.
func TestProcStop(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	p, err := StartProc("sh", "/bin/sh", []string{"-c", "sleep 600 & wait"}, filepath.Join(t.TempDir(), "sh.log"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Exited() {
		t.Fatalf("exited at once: %v", p.ExitError())
	}
	p.Stop(time.Hour)
	if !p.Exited() {
		t.Fatal("Stop returned before the process exited")
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit: %v, want os.ErrProcessDone", err)
	}
	p.Stop(time.Hour)
	p.Kill()
}

// TestProcStopWhilePaused stops a process that SIGSTOP has paused (a soak
// pauses the API server): Stop's SIGTERM must reach it without waiting out
// the grace period, so Stop also continues the group. The shell handles
// SIGTERM, as kube-apiserver does (an unhandled one kills even a stopped
// process).
func TestProcStopWhilePaused(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	p, err := StartProc("sh", "/bin/sh", []string{"-c", "trap 'exit 0' TERM; echo trapped; sleep 600 & wait"}, filepath.Join(t.TempDir(), "sh.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	for Tail(p.LogPath, 1) != "trapped" { // the trap is set
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		p.Stop(time.Hour)
	}()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop of a paused process did not return within 30s: SIGTERM never reached it")
	}
}

// TestStartProcWithHostname: the child sees the host name it was given,
// this process keeps its own, and the child's stdout reaches the log.
func TestStartProcWithHostname(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	before, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "uname.log")
	p, err := StartProcWithHostname("uname", "gpushare-test-host", "/bin/sh", []string{"-c", "cat /proc/sys/kernel/hostname"}, logPath)
	if err != nil {
		t.Skipf("no UTS namespace here: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !p.Exited() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !p.Exited() {
		p.Kill()
		t.Fatal("the child did not exit")
	}
	if p.err != nil {
		t.Fatal(p.ExitError())
	}
	if got := Tail(logPath, 1); got != "gpushare-test-host" {
		t.Errorf("the child's host name = %q, want gpushare-test-host", got)
	}
	if after, _ := os.Hostname(); after != before {
		t.Errorf("this process's host name changed from %q to %q", before, after)
	}
}

// fakeListener is a listener on a port it only claims.
type fakeListener struct{ port int }

func (f fakeListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (f fakeListener) Close() error              { return nil }
func (f fakeListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: f.port} }

// TestFreePortsNeverRepeat: a port handed out once is never handed out
// again in the process, even when the kernel offers it again (as it did
// when an extender's port went to the kube-apiserver started before the
// extender listened).
func TestFreePortsNeverRepeat(t *testing.T) {
	offers := []int{61001, 61001, 61001, 61002, 61003, 61002, 61004}
	orig := listenLoopback
	t.Cleanup(func() { listenLoopback = orig })
	listenLoopback = func() (net.Listener, error) {
		if len(offers) == 0 {
			return nil, errors.New("no more fake ports")
		}
		p := offers[0]
		offers = offers[1:]
		return fakeListener{port: p}, nil
	}
	a, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	if a != "127.0.0.1:61001" || !slices.Equal(ports, []int{61002, 61003, 61004}) {
		t.Errorf("FreeAddr %s then freePorts(3) %v; want 127.0.0.1:61001, then [61002 61003 61004] (61001 and 61002 not again)", a, ports)
	}
}
