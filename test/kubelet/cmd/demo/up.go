package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
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
// PID files still running (after a crash of the supervisor); see
// supervisor.Down.
func down(o options) error {
	stopped, err := supervisor.Down(o.files(), processesFile, os.Stdout)
	if err != nil {
		return err
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
