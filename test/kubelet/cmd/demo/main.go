// Command gpushare-demo runs gpushare on this machine, no GPU or Docker
// needed: a real etcd, kube-apiserver and kube-scheduler on 127.0.0.1 (TLS,
// RBAC), the scheduler extender as its service account, and simulated GPU
// nodes, each a node agent (a test double of the kubelet hosting kubelet's
// own device manager) plus the real device plugin with --fake-gpus. It
// applies manifests/examples/, prints `kubectl inspect gpushare` and, per
// container, the card in the pod's annotation next to the
// NVIDIA_VISIBLE_DEVICES the container got, and leaves the cluster running.
//
//	gpushare-demo up [--nodes 3] [--extender-port 39999]   (make demo)
//	gpushare-demo status                                    report again
//	gpushare-demo down                                      (make demo-down)
//
// up builds what is missing, then starts a supervisor process (`serve`,
// detached, in its own session) that owns every cluster process and writes
// their PID files under _output/demo; down stops exactly those processes,
// checking each PID's /proc/PID/cmdline first.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/supervisor"
)

const usage = `usage: gpushare-demo <command> [flags]

Commands:
  up       build what is missing, start the cluster (or find it running), apply
           manifests/examples/ and print the report and the KUBECONFIG line
  status   print the report of the running demo again
  down     stop every process the demo started
Flags:
`

// options are the flags shared by the commands.
type options struct {
	dir          string // state directory
	root         string // repository root
	nodes        int
	extenderPort int
}

func main() {
	fs := flag.NewFlagSet("gpushare-demo", flag.ExitOnError)
	var o options
	fs.StringVar(&o.dir, "dir", "", "state directory: PID files, logs, kubeconfigs, etcd data (default <repo>/_output/demo)")
	fs.IntVar(&o.nodes, "nodes", 3, "simulated GPU nodes, cycling 4×T4 16 GiB, 2×A100 80 GiB, 8×V100 32 GiB")
	fs.IntVar(&o.extenderPort, "extender-port", 39999, "the extender's port on 127.0.0.1")
	os.Exit(supervisor.Main("demo", fs, usage, os.Args[1:], o.setup, supervisor.Commands{
		Up:     func(ctx context.Context) error { return up(ctx, o) },
		Status: func(ctx context.Context) error { return status(ctx, o) },
		Down:   func(context.Context) error { return down(o) },
		Serve:  func(ctx context.Context) error { return serve(ctx, o) },
	}))
}

// setup finds the repository and the state directory, and checks the flags.
func (o *options) setup() error {
	root, err := framework.RepoRoot()
	if err != nil {
		return fmt.Errorf("%w: run it inside the gpushare repository", err)
	}
	o.root = root
	if o.dir, err = supervisor.StateDir(root, o.dir, "demo"); err != nil {
		return err
	}
	if o.nodes < 1 || o.nodes > 200 {
		return fmt.Errorf("--nodes %d: want 1..200", o.nodes)
	}
	return nil
}
