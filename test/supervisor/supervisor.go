// Package supervisor starts a demo's supervisor and finds it again: a
// process of the demo's own program (its "serve" command), in a session
// of its own so that it outlives the command that started it and the
// terminal's Ctrl-C, which owns the cluster's processes. Its state lives
// in files of a directory (Files). The programs of `make demo`,
// `make dra-demo` and `make node-demo` use it, and Main is their skeleton.
package supervisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ServeCommand is the supervisor's command: the first argument of its
// program, which Running checks.
const ServeCommand = "serve"

// Files are the supervisor's files, named relative to Dir.
type Files struct {
	Dir string
	// PID holds "PID EXE" of the supervisor.
	PID string
	// Ready exists once the cluster is up; the supervisor writes into it
	// what the demo's other commands need (e.g. a kubeconfig's path).
	Ready string
	// Failed holds why the supervisor gave up.
	Failed string
	// Log is the supervisor's output.
	Log string
}

// Path is name's path in f.Dir.
func (f Files) Path(name string) string { return filepath.Join(f.Dir, name) }

// Start starts exe with ServeCommand and args as the supervisor, writes
// its PID file, echoes its log to out (indented) and returns once the
// Ready file exists. When the supervisor exits first, the error carries
// the Failed file's text; when ctx ends or timeout passes, the supervisor
// is stopped (SIGTERM, which stops what it started) and waited for.
func Start(ctx context.Context, f Files, exe string, args []string, out io.Writer, timeout time.Duration) error {
	logFile, err := os.Create(f.Path(f.Log))
	if err != nil {
		return fmt.Errorf("creating %s: %w", f.Path(f.Log), err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(exe, append([]string{ServeCommand}, args...)...) //nolint:gosec // G204: the demo's own program
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the supervisor: %w", err)
	}
	if err := WriteAtomic(f.Path(f.PID), fmt.Sprintf("%d %s\n", cmd.Process.Pid, exe)); err != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var offset int64
	echo := func() { offset = echoFrom(out, f.Path(f.Log), offset) }
	deadline := time.After(timeout)
	// stop stops the supervisor and returns how it exited, which is no
	// news when it was stopped on purpose.
	stop := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		err := <-exited
		echo()
		return err
	}
	for {
		echo()
		if _, err := os.Stat(f.Path(f.Ready)); err == nil {
			return nil
		}
		select {
		case err := <-exited:
			echo()
			why, _ := os.ReadFile(f.Path(f.Failed))
			if len(why) == 0 {
				why = []byte(fmt.Sprintf("the supervisor exited (%v)", err))
			}
			return fmt.Errorf("%s\n(logs in %s; everything it had started is stopped)", strings.TrimSpace(string(why)), f.Dir)
		case <-ctx.Done():
			_ = stop()
			return errors.New("interrupted; everything the supervisor had started is stopped")
		case <-deadline:
			_ = stop()
			return fmt.Errorf("not up after %s; stopped it (logs in %s)", timeout, f.Dir)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// echoFrom writes the complete lines of path after offset to out,
// indented, and returns the new offset.
func echoFrom(out io.Writer, path string, offset int64) int64 {
	f, err := os.Open(path)
	if err != nil {
		return offset
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return offset
	}
	b, _ := io.ReadAll(f)
	i := strings.LastIndexByte(string(b), '\n')
	if i < 0 {
		return offset
	}
	for _, line := range strings.Split(string(b[:i]), "\n") {
		_, _ = fmt.Fprintln(out, "  "+line)
	}
	return offset + int64(i+1)
}

// Running returns the supervisor's pid when the PID file names a live
// process whose command line is the recorded executable and ServeCommand
// (so a reused pid is never taken for it).
func Running(f Files) (int, bool) {
	b, err := os.ReadFile(f.Path(f.PID))
	if err != nil {
		return 0, false
	}
	fields := strings.Fields(string(b))
	if len(fields) < 2 {
		return 0, false
	}
	pid, err := strconv.Atoi(fields[0])
	if err != nil || pid <= 1 {
		return 0, false
	}
	argv, err := Cmdline(pid)
	if err != nil || len(argv) < 2 || argv[0] != fields[1] || argv[1] != ServeCommand {
		return 0, false
	}
	return pid, true
}

// Cmdline returns the argv of a running process from /proc/PID/cmdline;
// an error if there is no such process.
func Cmdline(pid int) ([]string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil, fmt.Errorf("reading the command line of pid %d: %w", pid, err)
	}
	b = bytes.TrimRight(b, "\x00")
	if len(b) == 0 {
		return nil, fmt.Errorf("pid %d has exited (zombie or kernel thread)", pid)
	}
	return strings.Split(string(b), "\x00"), nil
}

// GiveUp records err in the Failed file, for the waiting Start, and
// returns it.
func (f Files) GiveUp(err error) error {
	_ = WriteAtomic(f.Path(f.Failed), err.Error()+"\n")
	return err
}

// WriteAtomic writes content to path through a temporary file and a
// rename, so a reader never sees half of it.
func WriteAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil { //nolint:gosec // G306: pids, paths
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// Lines is an io.Writer that hands each complete line written to it, and
// each line of a write without a final newline, to a function (a logger).
type Lines func(line string)

// Write calls l once per line of p.
func (l Lines) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l(line)
	}
	return len(p), nil
}

// StateDir is a demo's state directory as an absolute path: dir as given
// (its --dir flag), or <root>/_output/<name> when dir is empty.
func StateDir(root, dir, name string) (string, error) {
	if dir == "" {
		dir = filepath.Join(root, "_output", name)
	}
	return filepath.Abs(dir)
}
