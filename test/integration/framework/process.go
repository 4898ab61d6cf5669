package framework

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpushare/gpushare/test/util"
)

// Proc is one child process of a test: in its own process group, so a stop
// reaches whatever it forked, and on Linux killed by the kernel if the test
// binary dies (Pdeathsig), so neither a failure nor `go test -timeout`
// leaves it behind. The control plane, the e2e cluster and the tests that
// run the extender binary all start their children with StartProc.
type Proc struct {
	Name    string   // e.g. "kube-apiserver", "extender", "t4-1/plugin"
	Path    string   // the executable
	Args    []string // without the executable
	LogPath string   // stdout and stderr, appended

	cmd     *exec.Cmd
	started time.Time     // just before it was started
	done    chan struct{} // closed once the process has exited
	err     error         // the Wait result, valid once done is closed
}

// StartProc starts path with args, stdout and stderr appended to logPath.
// The child outlives no context: only Stop, Kill or the death of this
// process ends it.
func StartProc(name, path string, args []string, logPath string) (*Proc, error) {
	return startProc(name, path, args, logPath, exec.Command(path, args...), childAttr())
}

// StartProcWithHostname is StartProc with the child in a UTS namespace of
// its own named hostname: os.Hostname there returns hostname, as in a pod.
// So two kube-schedulers on this machine have distinct leader identities
// (kube-scheduler's is "<host name>_<uuid>") while sharing its network.
// Linux only: the namespace needs root or unprivileged user namespaces,
// and the child is started through /bin/sh, which names the host and
// execs path (so the process id is path's).
func StartProcWithHostname(name, hostname, path string, args []string, logPath string) (*Proc, error) {
	attr, err := utsAttr()
	if err != nil {
		return nil, fmt.Errorf("starting %s on host %s: %w", name, hostname, err)
	}
	sh := append([]string{"-c", `echo "$0" > /proc/sys/kernel/hostname && exec "$@"`, hostname, path}, args...)
	return startProc(name, path, args, logPath, exec.Command("/bin/sh", sh...), attr)
}

// startProc starts cmd, which runs path with args, with attr.
func startProc(name, path string, args []string, logPath string, cmd *exec.Cmd, attr *syscall.SysProcAttr) (*Proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", name, err)
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = attr
	started := time.Now()
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, path, err)
	}
	p := &Proc{Name: name, Path: path, Args: args, LogPath: logPath, cmd: cmd, started: started, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = lf.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id, also its process group id (Setpgid).
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitError describes how the process ended, with the end of its log.
func (p *Proc) ExitError() error {
	return fmt.Errorf("%s exited: %w; last lines of %s:\n%s", p.Name, p.err, p.LogPath, Tail(p.LogPath, 40))
}

// Signal sends sig to the process alone.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("signalling %s: %w", p.Name, os.ErrProcessDone)
	}
	return p.cmd.Process.Signal(sig)
}

// Stop sends SIGTERM (and SIGCONT, for a paused process) to the process
// group, SIGKILL after grace, and
// returns once the process has exited. Stopping an exited process is a no-op.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	if err := syscall.Kill(-p.PID(), syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	// A process paused by SIGSTOP handles the SIGTERM only once continued.
	_ = syscall.Kill(-p.PID(), syscall.SIGCONT)
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill sends SIGKILL to the process group (a crash) and returns once the
// process has exited.
func (p *Proc) Kill() {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Tail returns the last n lines of the file at path, or a note saying why
// it cannot.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "(no log)"
		}
		return fmt.Sprintf("(reading %s: %v)", path, err)
	}
	return LastLines(string(b), n)
}

// LastLines returns the last n lines of s, without a trailing newline.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// FreeAddr returns a 127.0.0.1:PORT address whose port was free a moment ago.
func FreeAddr() (string, error) {
	ports, err := freePorts(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), nil
}

// handedOut holds every port freePorts returned in this process. A port
// handed out is closed until its user listens on it, and the kernel may
// give it again meanwhile: once, an extender's port went to the
// kube-apiserver started between the choice and the extender's listen.
// So no port is handed out twice in one process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// listenLoopback listens on a free loopback port below the kernel's
// ephemeral range (util.ListenLoopback; tests replace it).
var listenLoopback = util.ListenLoopback

// freePortAttempts bounds the listens freePorts makes for one call.
const freePortAttempts = 1000

// freePorts returns n distinct loopback ports that were free a moment ago
// and that no earlier call in this process returned (all the ports it
// looks at are held open together, so the kernel offers each once).
func freePorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for attempt := 0; len(ports) < n; attempt++ {
		if attempt == freePortAttempts {
			return nil, fmt.Errorf("finding %d free ports: %d listens gave only ports handed out before", n, freePortAttempts)
		}
		l, err := listenLoopback()
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		ls = append(ls, l)
		port := l.Addr().(*net.TCPAddr).Port
		if handedOut.ports[port] {
			continue
		}
		handedOut.ports[port] = true
		ports = append(ports, port)
	}
	return ports, nil
}
