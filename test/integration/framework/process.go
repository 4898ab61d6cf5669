package framework

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// process is one control-plane child.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{} // closed when the process has exited
	err     error         // the Wait result, valid once done is closed
}

// startProcess starts bin with args, stdout and stderr going to logsDir/name.log.
// The child outlives no context: only stop (or the death of this process) ends it.
func startProcess(name, bin string, args []string, logsDir string) (*process, error) {
	logPath := filepath.Join(logsDir, name+".log")
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = lf
	cmd.Stderr = lf
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, logPath: logPath, logFile: lf, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes an exited process together with the end of its log.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited: %w; last lines of %s:\n%s", p.name, p.err, p.logPath, tailFile(p.logPath, 40))
}

// stop sends SIGTERM to the process group, waits up to grace, then sends
// SIGKILL, and returns once the process has exited.
func (p *process) stop(grace time.Duration) {
	if p.exited() {
		return
	}
	pgid := p.pid() // Setpgid makes the child lead a group with its own pid.
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
