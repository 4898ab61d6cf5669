package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a child gets between SIGTERM and SIGKILL.
const stopGrace = 10 * time.Second

// Proc is one child process: in its own process group, so a stop reaches
// whatever it forked, and killed by the kernel if this process dies
// (Pdeathsig), so no test failure or crash leaves it behind.
type Proc struct {
	Name    string   // e.g. "extender", "t4-1/plugin"
	Path    string   // absolute path of the executable
	Args    []string // without the executable
	LogPath string   // stdout and stderr, appended

	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited
	err  error         // the Wait result, valid once done is closed
}

// StartProc starts path with args, output appended to logPath.
func StartProc(name, path string, args []string, logPath string) (*Proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the log of %s: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", name, path, err)
	}
	p := &Proc{Name: name, Path: path, Args: args, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = lf.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process id, also its process group id.
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
	return fmt.Errorf("%s exited (%w); last lines of %s:\n%s", p.Name, p.err, p.LogPath, Tail(p.LogPath, 25))
}

// Signal sends sig to the process alone.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return fmt.Errorf("signalling %s: %w", p.Name, os.ErrProcessDone)
	}
	return p.cmd.Process.Signal(sig)
}

// Stop sends SIGTERM to the process group, SIGKILL after grace, and
// returns once the process has exited. Stopping an exited process is a no-op.
func (p *Proc) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	if err := syscall.Kill(-p.PID(), syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill sends SIGKILL to the process group (a crash) and waits for the exit.
func (p *Proc) Kill() {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.PID(), syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Tail returns the last n lines of a file, or a note why it cannot.
func Tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Cmdline returns the argv of a running process from /proc/PID/cmdline;
// an error if there is no such process.
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return nil, fmt.Errorf("reading the command line of pid %d: %w", pid, err)
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, fmt.Errorf("pid %d has exited (zombie or kernel thread)", pid)
	}
	return strings.Split(string(b), "\x00"), nil
}
