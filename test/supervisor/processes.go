package supervisor

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is one line of a demo's processes file, "PID EXE [NAME]": a
// process the supervisor started, which Down stops if the supervisor
// could not.
type Process struct {
	PID  int
	Exe  string // the executable, as /proc/PID/cmdline's first word
	Name string // for messages; default: the executable's base name
}

// ReadProcesses parses a processes file; a missing file is no processes.
func ReadProcesses(path string) ([]Process, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var out []Process
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil || pid <= 1 {
			return nil, fmt.Errorf("%s: bad line %q", path, line)
		}
		p := Process{PID: pid, Exe: f[1], Name: filepath.Base(f[1])}
		if len(f) > 2 {
			p.Name = f[2]
		}
		out = append(out, p)
	}
	return out, nil
}

// Alive reports whether p's PID runs p's executable (so a reused PID is
// never taken for ours).
func (p Process) Alive() bool {
	argv, err := Cmdline(p.PID)
	return err == nil && argv[0] == p.Exe
}

// waitGone waits until p no longer runs its executable.
func (p Process) waitGone(timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for p.Alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

// supervisorStopTimeout bounds Down's wait for the supervisor, which stops
// everything it started before it exits.
const supervisorStopTimeout = 60 * time.Second

// Down stops a demo: its supervisor (SIGTERM, which stops what it
// started), then every process of the processes file f.Path(processes)
// still running its executable (after a crash of the supervisor: SIGTERM,
// SIGKILL after 10 s). It says what it stops on out and returns how many
// it stopped; the supervisor's files are left to the caller.
func Down(f Files, processes string, out io.Writer) (int, error) {
	stopped := 0
	if pid, ok := Running(f); ok {
		_, _ = fmt.Fprintf(out, "stopping the supervisor (pid %d), which stops the cluster\n", pid)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return 0, fmt.Errorf("signalling pid %d: %w", pid, err)
		}
		deadline := time.Now().Add(supervisorStopTimeout)
		for {
			if _, ok := Running(f); !ok {
				break
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("the supervisor (pid %d) is still running after %s; see %s", pid, supervisorStopTimeout, f.Path(f.Log))
			}
			time.Sleep(100 * time.Millisecond)
		}
		stopped++
	}
	procs, err := ReadProcesses(f.Path(processes))
	if err != nil {
		return stopped, err
	}
	for _, p := range procs {
		if !p.Alive() {
			continue
		}
		_, _ = fmt.Fprintf(out, "stopping %s (pid %d)\n", p.Name, p.PID)
		_ = syscall.Kill(p.PID, syscall.SIGTERM)
		if !p.waitGone(10 * time.Second) {
			_ = syscall.Kill(p.PID, syscall.SIGKILL)
			p.waitGone(5 * time.Second)
		}
		stopped++
	}
	return stopped, nil
}
