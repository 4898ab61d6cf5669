package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gpushare/gpushare/test/kubelet/cluster"
	"github.com/gpushare/gpushare/test/supervisor"
)

// startTimeout bounds the supervisor's start-up (the builds are done by then).
const startTimeout = 5 * time.Minute

// up builds, starts the supervisor unless one runs, and reports.
func up(ctx context.Context, o options) error {
	if pid, ok := supervisor.Running(o.files()); ok {
		fmt.Printf("The demo is already running (supervisor pid %d); here is its report. `make demo-down` stops it.\n\n", pid)
		return status(ctx, o)
	}
	if err := cluster.CheckPort(fmt.Sprintf("127.0.0.1:%d", o.extenderPort)); err != nil {
		return fmt.Errorf("%w (make demo EXTENDER_PORT=N)", err)
	}
	start := time.Now()
	fmt.Println("== Building: the control plane on the first run only (about 15 min on 2 cores, then cached in ~/.cache/gpushare), then bin/")
	if _, err := cluster.Build(ctx, filepath.Join(o.root, "bin"), os.Stdout); err != nil {
		var be *cluster.BuildError
		if errors.As(err, &be) {
			return fmt.Errorf("%w\nFix the build (make build shows the same errors) and run make demo again", err)
		}
		return err
	}
	built := time.Since(start)

	// A new cluster each time: clear the last run's state (only our files).
	for _, f := range []string{clusterDir, supervisorPIDFile, processesFile, readyFile, failedFile, supervisorLog} {
		if err := os.RemoveAll(o.path(f)); err != nil {
			return fmt.Errorf("clearing the last demo's state: %w", err)
		}
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", o.dir, err)
	}
	fmt.Printf("\n== Starting the cluster (state and logs in %s)\n", o.dir)
	if err := startSupervisor(ctx, o); err != nil {
		return err
	}
	fmt.Printf("\nbuilt in %.1fs, cluster up in %.1fs\n", built.Seconds(), (time.Since(start) - built).Seconds())
	return status(ctx, o)
}

// startSupervisor starts `serve` in a session of its own (so it outlives
// this process and the terminal's Ctrl-C), echoes its log and waits until
// it has written the ready file.
func startSupervisor(ctx context.Context, o options) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program: %w", err)
	}
	args := []string{"--dir", o.dir, "--nodes", strconv.Itoa(o.nodes), "--extender-port", strconv.Itoa(o.extenderPort)}
	if err := supervisor.Start(ctx, o.files(), exe, args, os.Stdout, startTimeout); err != nil {
		return fmt.Errorf("the cluster did not start: %w", err)
	}
	return nil
}

// down stops the supervisor, which stops the cluster, then anything of the
// PID files still running (after a crash of the supervisor). It signals
// only processes whose /proc/PID/cmdline is the recorded executable.
func down(o options) error {
	stopped := 0
	if pid, ok := supervisor.Running(o.files()); ok {
		fmt.Printf("stopping the demo supervisor (pid %d), which stops the cluster\n", pid)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("signalling pid %d: %w", pid, err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			if _, ok := supervisor.Running(o.files()); !ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the supervisor (pid %d) is still running after 60s; see %s", pid, o.path(supervisorLog))
			}
			time.Sleep(100 * time.Millisecond)
		}
		stopped++
	}
	recs, err := readRecords(o.path(processesFile))
	if err != nil {
		return err
	}
	for _, r := range recs {
		if !r.alive() {
			continue
		}
		fmt.Printf("stopping %s (pid %d)\n", r.name, r.pid)
		_ = syscall.Kill(r.pid, syscall.SIGTERM)
		if !waitGone(r, 10*time.Second) {
			_ = syscall.Kill(r.pid, syscall.SIGKILL)
			waitGone(r, 5*time.Second)
		}
		stopped++
	}
	for _, f := range []string{supervisorPIDFile, processesFile, readyFile} {
		_ = os.Remove(o.path(f))
	}
	if stopped == 0 {
		fmt.Println("no demo running")
		return nil
	}
	fmt.Printf("demo stopped (logs kept in %s)\n", o.dir)
	return nil
}

// waitGone waits until r no longer runs r's executable.
func waitGone(r record, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for r.alive() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}
