package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/test/chart/realnode"
	"github.com/gpushare/gpushare/test/supervisor"
)

// Files of the state directory.
const (
	supervisorPIDFile = "node-demo.pid" // "PID EXE" of the supervisor
	readyFile         = "ready"         // the admin kubeconfig path, once up
	failedFile        = "failed"        // why the supervisor gave up
	clusterDir        = "cluster"       // realnode.Options.Dir
	supervisorLog     = "node-demo.log" // the supervisor's progress
)

// Namespace is where the demo's GPU pods run.
const demoNamespace = "demo"

// demoPods are the demo's GPU pods: name -> GiB. Any placement of the
// first two leaves a card with room for the third.
var demoPods = []struct {
	name string
	gib  int64
}{{"gpu-4gib", 4}, {"gpu-8gib", 8}, {"gpu-12gib", 12}}

// Timeouts of the supervisor's steps after the start.
const (
	installTimeout = 5 * time.Minute
	podTimeout     = 3 * time.Minute
)

func (o options) path(name string) string { return filepath.Join(o.dir, name) }

// files are the supervisor's files.
func (o options) files() supervisor.Files {
	return supervisor.Files{Dir: o.dir, PID: supervisorPIDFile, Ready: readyFile, Failed: failedFile, Log: supervisorLog}
}

// serve is the supervisor: it starts the cluster, installs the chart,
// starts the demo's pods, writes the ready file and, on SIGTERM, tears
// everything down.
func serve(ctx context.Context, o options) error {
	logf := func(format string, args ...any) {
		fmt.Printf("%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	c, err := realnode.Start(ctx, realnode.Options{
		Dir:     o.path(clusterDir),
		Purpose: fmt.Sprintf("make node-demo (supervisor pid %d; make node-demo-down stops it)", os.Getpid()),
		Out:     supervisor.Lines(func(line string) { logf("%s", line) }),
	})
	if err != nil {
		return o.files().GiveUp(err)
	}
	stop := func() {
		logf("tearing the node down and stopping the control plane")
		if err := c.Stop(); err != nil {
			logf("teardown: %v", err)
		}
		for _, f := range []string{readyFile, supervisorPIDFile} {
			_ = os.Remove(o.path(f))
		}
		logf("stopped")
	}
	if err := demo(ctx, c, logf); err != nil {
		stop()
		return o.files().GiveUp(err)
	}
	if err := supervisor.WriteAtomic(o.path(readyFile), c.CP.AdminKubeconfig()+"\n"); err != nil {
		stop()
		return o.files().GiveUp(err)
	}
	logf("node demo up")
	reported := map[string]bool{}
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			stop()
			return nil
		case <-t.C:
			for _, err := range append(c.Node.Exited(), c.CP.Exited()...) {
				if !reported[err.Error()] {
					reported[err.Error()] = true
					logf("a process of the demo ended unexpectedly: %v", err)
				}
			}
		}
	}
}

// demo installs the chart and starts the GPU pods, waiting until each has
// reported from inside its container.
func demo(ctx context.Context, c *realnode.Cluster, logf func(string, ...any)) error {
	logf("helm install %s manifests/charts/gpushare -n %s (topology %s)", realnode.ReleaseName, realnode.Namespace, realnode.SecondScheduler)
	if _, err := c.Install(ctx, realnode.Values(realnode.SecondScheduler, nil), installTimeout, func(string, ...any) {}); err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", demoNamespace, err)
	}
	for _, p := range demoPods {
		pod := realnode.GPUPod(demoNamespace, p.name, c.Images.Probe, p.gib)
		if _, err := c.Client.CoreV1().Pods(demoNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating pod %s/%s: %w", demoNamespace, p.name, err)
		}
	}
	for _, p := range demoPods {
		if _, _, _, err := c.WaitReport(ctx, demoNamespace, p.name, 0, podTimeout); err != nil {
			return err
		}
		logf("pod %s/%s runs and has reported", demoNamespace, p.name)
	}
	return nil
}
