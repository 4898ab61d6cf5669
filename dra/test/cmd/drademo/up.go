package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/supervisor"
)

// startTimeout bounds the supervisor's start-up (the builds are done by then).
const startTimeout = 5 * time.Minute

// inspectBinary is the kubectl plugin the report runs, built by up.
func (o options) inspectBinary() string {
	return filepath.Join(o.root, "bin", "kubectl-inspect-gpushare")
}

// up builds, starts the supervisor unless one runs, and reports.
func up(ctx context.Context, o options) error {
	if pid, ok := supervisor.Running(o.files()); ok {
		fmt.Printf("The DRA demo is already running (supervisor pid %d); here is its report. `make dra-demo-down` stops it.\n\n", pid)
		return status(ctx, o)
	}
	start := time.Now()
	fmt.Printf("== Building: the Kubernetes %s control plane on the first run only (about 15 min on 2 cores, then cached in ~/.cache/gpushare), then bin/kubectl-inspect-gpushare\n", framework.KubernetesVersion)
	if _, err := framework.EnsureVersionBinaries(ctx, framework.KubernetesVersion, true); err != nil {
		return err
	}
	// -trimpath and no cgo, as its image and the extender's are built
	// (pkg/build/image's recipes): make test compiles client-go that way
	// before this runs, so a cold run compiles little more here.
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", o.inspectBinary(), "./kubectl-inspect-gpushare") //nolint:gosec // the demo's own output path
	build.Dir, build.Env = o.root, append(os.Environ(), "CGO_ENABLED=0")
	var out bytes.Buffer
	build.Stdout, build.Stderr = &out, &out
	if err := build.Run(); err != nil {
		return fmt.Errorf("building the kubectl plugin (go build ./kubectl-inspect-gpushare): %w\n%s", err, framework.LastLines(out.String(), 30))
	}
	built := time.Since(start)

	// A new cluster each time: clear the last run's state (only our files).
	for _, f := range []string{clusterDir, nodeDir, supervisorPIDFile, processesFile, readyFile, failedFile, preparedFile, supervisorLog} {
		if err := os.RemoveAll(o.path(f)); err != nil {
			return fmt.Errorf("clearing the last demo's state: %w", err)
		}
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil { //nolint:gosec // the demo's directory, which the user reads
		return fmt.Errorf("creating %s: %w", o.dir, err)
	}
	fmt.Printf("\n== Starting the cluster (state and logs in %s)\n", o.dir)
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this program: %w", err)
	}
	if err := supervisor.Start(ctx, o.files(), exe, []string{"--dir", o.dir, "--gpus", o.gpus}, os.Stdout, startTimeout); err != nil {
		return fmt.Errorf("the cluster did not start: %w", err)
	}
	fmt.Printf("\nbuilt in %.1fs, cluster up in %.1fs\n", built.Seconds(), (time.Since(start) - built).Seconds())
	return status(ctx, o)
}

// down stops the supervisor, which stops the driver and the control plane,
// then anything of the processes file still running (after a crash of the
// supervisor); see supervisor.Down.
func down(o options) error {
	stopped, err := supervisor.Down(o.files(), processesFile, os.Stdout)
	if err != nil {
		return err
	}
	for _, f := range []string{supervisorPIDFile, processesFile, readyFile} {
		_ = os.Remove(o.path(f))
	}
	if stopped == 0 {
		fmt.Println("no DRA demo running")
		return nil
	}
	fmt.Printf("DRA demo stopped (logs kept in %s)\n", o.dir)
	return nil
}
