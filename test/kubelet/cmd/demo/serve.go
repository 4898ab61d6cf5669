package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpushare/gpushare/test/kubelet/cluster"
	"github.com/gpushare/gpushare/test/supervisor"
)

// Files of the state directory.
const (
	supervisorPIDFile = "demo.pid"  // "PID EXE" of the supervisor (supervisor.Files)
	processesFile     = "processes" // "PID EXE NAME" per cluster process
	readyFile         = "ready"     // the admin kubeconfig path, once up
	failedFile        = "failed"    // why the supervisor gave up
	clusterDir        = "cluster"   // cluster.Config.Dir
	supervisorLog     = "demo.log"  // the supervisor's progress
)

// demoTokenTTL is the life of the components' service-account tokens: the
// demo keeps running for as long as one plays with it.
const demoTokenTTL = 30 * 24 * time.Hour

func (o options) path(name string) string { return filepath.Join(o.dir, name) }

// files are the supervisor's files.
func (o options) files() supervisor.Files {
	return supervisor.Files{Dir: o.dir, PID: supervisorPIDFile, Ready: readyFile, Failed: failedFile, Log: supervisorLog}
}

// serve is the supervisor: it starts the cluster, writes the PID and ready
// files, and stops everything on SIGTERM.
func serve(ctx context.Context, o options) error {
	logf := func(format string, args ...any) {
		fmt.Printf("%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	bins, err := cluster.Installed(ctx, filepath.Join(o.root, "bin"))
	if err != nil {
		return o.files().GiveUp(err)
	}
	c, err := cluster.Start(ctx, cluster.Config{
		Dir:          o.path(clusterDir),
		Bins:         bins,
		ExtenderAddr: fmt.Sprintf("127.0.0.1:%d", o.extenderPort),
		Nodes:        cluster.DefaultNodes(o.nodes),
		TokenTTL:     demoTokenTTL,
		Verbosity:    2,
		Progress:     supervisor.Lines(func(s string) { logf("%s", s) }),
	})
	if err != nil {
		return o.files().GiveUp(err)
	}
	var lines strings.Builder
	for _, p := range c.Processes() {
		fmt.Fprintf(&lines, "%d %s %s\n", p.PID, p.Exe, p.Name)
	}
	if err := supervisor.WriteAtomic(o.path(processesFile), lines.String()); err != nil {
		c.Stop()
		return o.files().GiveUp(err)
	}
	if err := supervisor.WriteAtomic(o.path(readyFile), c.AdminKubeconfig()+"\n"); err != nil {
		c.Stop()
		return o.files().GiveUp(err)
	}
	logf("cluster up; %d processes recorded in %s", len(c.Processes()), o.path(processesFile))

	reported := map[string]bool{}
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			logf("stopping every process of the demo")
			c.Stop()
			for _, f := range []string{processesFile, readyFile, supervisorPIDFile} {
				_ = os.Remove(o.path(f))
			}
			logf("stopped")
			return nil
		case <-t.C:
			for _, err := range c.Exited() {
				if !reported[err.Error()] {
					reported[err.Error()] = true
					logf("a demo process ended unexpectedly: %v", err)
				}
			}
		}
	}
}
