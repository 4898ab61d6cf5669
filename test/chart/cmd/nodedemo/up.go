package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/kubeclient"
	"github.com/gpushare/gpushare/test/chart/realnode"
	"github.com/gpushare/gpushare/test/node"
	"github.com/gpushare/gpushare/test/node/probe"
)

// startTimeout bounds the supervisor's start, builds included (a cold
// Kubernetes build is about 20 minutes on two cores).
const startTimeout = 45 * time.Minute

// stopTimeout bounds the supervisor's teardown.
const stopTimeout = 5 * time.Minute

// up starts the supervisor unless one runs, and reports.
func up(ctx context.Context, o options) error {
	if pid, ok := supervisor(o); ok {
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
	logFile, err := os.Create(o.path(supervisorLog))
	if err != nil {
		return fmt.Errorf("creating %s: %w", o.path(supervisorLog), err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(exe, "serve", "--dir", o.dir) //nolint:gosec // G204: this program
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the node demo's supervisor: %w", err)
	}
	if err := writeAtomic(o.path(supervisorPIDFile), fmt.Sprintf("%d %s\n", cmd.Process.Pid, exe)); err != nil {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var offset int64
	echo := func() { offset = echoFrom(o.path(supervisorLog), offset) }
	deadline := time.After(startTimeout)
	for {
		echo()
		if _, err := os.Stat(o.path(readyFile)); err == nil {
			return nil
		}
		select {
		case err := <-exited:
			echo()
			why, _ := os.ReadFile(o.path(failedFile))
			if len(why) == 0 {
				why = []byte(fmt.Sprintf("the supervisor exited (%v)", err))
			}
			return fmt.Errorf("the node demo did not start: %s\n(logs in %s; what it had started is stopped)", strings.TrimSpace(string(why)), o.dir)
		case <-ctx.Done():
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-exited
			return errors.New("interrupted; what the node demo had started is stopped")
		case <-deadline:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			<-exited
			return fmt.Errorf("the node demo was not up after %s; stopped it (logs in %s)", startTimeout, o.dir)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// echoFrom prints the complete lines of path after offset, indented, and
// returns the new offset.
func echoFrom(path string, offset int64) int64 {
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
		fmt.Println("  " + line)
	}
	return offset + int64(i+1)
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
	if pid, ok := supervisor(o); ok {
		fmt.Printf("stopping the node demo's supervisor (pid %d), which tears the node down\n", pid)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			return fmt.Errorf("signalling pid %d: %w", pid, err)
		}
		deadline := time.Now().Add(stopTimeout)
		for {
			if _, ok := supervisor(o); !ok {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the supervisor (pid %d) still runs after %s; see %s", pid, stopTimeout, o.path(supervisorLog))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if err := node.Cleanup(ctx, func(format string, args ...any) { fmt.Printf(format+"\n", args...) }); err != nil {
		return err
	}
	for _, f := range []string{supervisorPIDFile, readyFile} {
		_ = os.Remove(o.path(f))
	}
	fmt.Printf("node demo stopped; nothing of it runs (logs kept in %s)\n", o.dir)
	return nil
}

// supervisor returns the running supervisor's pid, if any: the pid file's
// process, when its command line is this program's serve.
func supervisor(o options) (int, bool) {
	b, err := os.ReadFile(o.path(supervisorPIDFile))
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || pid <= 1 {
		return 0, false
	}
	cmdline, err := os.ReadFile(filepath.Join("/proc", f[0], "cmdline"))
	if err != nil {
		return 0, false
	}
	argv := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(argv) < 2 || argv[0] != f[1] || argv[1] != "serve" {
		return 0, false
	}
	return pid, true
}
