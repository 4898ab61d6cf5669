package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/kubeclient"
	"github.com/gpushare/gpushare/test/chart/realnode"
	"github.com/gpushare/gpushare/test/node"
	"github.com/gpushare/gpushare/test/node/probe"
	"github.com/gpushare/gpushare/test/supervisor"
)

// startTimeout bounds the supervisor's start, builds included (a cold
// Kubernetes build is about 20 minutes on two cores).
const startTimeout = 45 * time.Minute

// stopTimeout bounds the supervisor's teardown.
const stopTimeout = 5 * time.Minute

// up starts the supervisor unless one runs, and reports.
func up(ctx context.Context, o options) error {
	if pid, ok := supervisor.Running(o.files()); ok {
		fmt.Printf("The node demo is already running (supervisor pid %d); here is its report. `make node-demo-down` stops it.\n\n", pid)
		return status(ctx, o)
	}
	for _, f := range []string{clusterDir, supervisorPIDFile, readyFile, failedFile, supervisorLog} {
		if err := os.RemoveAll(o.path(f)); err != nil {
			return fmt.Errorf("clearing the last demo's state: %w", err)
		}
	}
	if err := os.MkdirAll(o.dir, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", o.dir, err)
	}
	start := time.Now()
	fmt.Printf("== Starting the real node (state and logs in %s); the first run builds kubelet and the control plane (~20 min on 2 cores)\n", o.dir)
	if err := startSupervisor(ctx, o); err != nil {
		return err
	}
	fmt.Printf("\nup in %s\n", time.Since(start).Round(time.Second))
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
	if err := supervisor.Start(ctx, o.files(), exe, []string{"--dir", o.dir}, os.Stdout, startTimeout); err != nil {
		return fmt.Errorf("the node demo did not start: %w", err)
	}
	return nil
}

// status prints `kubectl inspect gpushare`, each demo pod's card by its
// annotation beside what its container sees, and the KUBECONFIG line.
func status(ctx context.Context, o options) error {
	b, err := os.ReadFile(o.path(readyFile))
	if err != nil {
		return fmt.Errorf("no node demo running in %s (make node-demo starts one): %w", o.dir, err)
	}
	kubeconfig := strings.TrimSpace(string(b))
	fmt.Println("\n== kubectl inspect gpushare")
	inspect := exec.CommandContext(ctx, filepath.Join(o.root, "_output", "images", "bin", "kubectl-inspect-gpushare")) //nolint:gosec // G204: the binary make images built
	inspect.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
	inspect.Stdout, inspect.Stderr = os.Stdout, os.Stderr
	if err := inspect.Run(); err != nil {
		return fmt.Errorf("kubectl inspect gpushare: %w", err)
	}
	client, err := kubeclient.New(kubeconfig, 50, 100, "gpushare-node-demo")
	if err != nil {
		return err
	}
	pods, err := client.CoreV1().Pods(demoNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing the demo's pods: %w", err)
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	fmt.Printf("\n== The demo's GPU pods: the card of their annotation, and what the container itself printed\n")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "POD\tGiB\tCARD\tUUID (annotation)\tNVIDIA_VISIBLE_DEVICES (container)\tISOLATION\tAGREE")
	bad := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		text, run, err := node.ContainerLog(p.Namespace, p.Name, string(p.UID), realnode.ProbeContainer)
		rep, perr := probe.Parse(text)
		if err != nil || perr != nil {
			fmt.Fprintf(w, "%s/%s\t-\t-\t-\t(no report: %v)\t-\tno\n", p.Namespace, p.Name, errors.Join(err, perr))
			bad++
			continue
		}
		pl, cerr := realnode.CheckPlacement(p, rep, run)
		visible, _ := rep.Getenv(realnode.EnvVisibleDevices)
		iso, _ := rep.Getenv(realnode.EnvIsolation)
		agree := "yes"
		if cerr != nil {
			agree, bad = "NO: "+cerr.Error(), bad+1
		}
		fmt.Fprintf(w, "%s/%s\t%d\t%d\t%s\t%s\t%s\t%s\n", p.Namespace, p.Name, pl.Units, pl.Card, pl.UUID, visible, iso, agree)
	}
	_ = w.Flush()
	fmt.Printf("\nKUBECONFIG=%s\n", kubeconfig)
	fmt.Println("(kubectl works against it too; make node-demo-down stops everything)")
	if bad > 0 {
		return fmt.Errorf("%d of the demo's pods do not run on the card their annotation names", bad)
	}
	return nil
}

// down stops the supervisor, which tears the node down and stops the
// control plane, then cleans up what a supervisor that died left.
func down(ctx context.Context, o options) error {
	if pid, ok := supervisor.Running(o.files()); ok {
		fmt.Printf("stopping the node demo's supervisor (pid %d), which tears the node down\n", pid)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("signalling pid %d: %w", pid, err)
		}
		deadline := time.Now().Add(stopTimeout)
		for {
			if _, ok := supervisor.Running(o.files()); !ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the supervisor (pid %d) still runs after %s; see %s", pid, stopTimeout, o.path(supervisorLog))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	// What a supervisor that died left; the node lock is free unless
	// another process (a test) runs a node of its own, which is then not
	// the demo's.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := node.Cleanup(cctx, func(format string, args ...any) { fmt.Printf(format+"\n", args...) })
	if errors.Is(err, node.ErrLocked) {
		fmt.Printf("nothing of the demo is left; %v\n", err)
	} else if err != nil {
		return err
	}
	for _, f := range []string{supervisorPIDFile, readyFile} {
		_ = os.Remove(o.path(f))
	}
	fmt.Printf("node demo stopped; nothing of it runs (logs kept in %s)\n", o.dir)
	return nil
}
