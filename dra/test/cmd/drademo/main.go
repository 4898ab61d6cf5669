// Command gpushare-dra-demo runs gpushare's DRA driver on this machine, no
// GPU, kubelet or Docker needed: a real etcd, kube-apiserver,
// kube-scheduler and kube-controller-manager (its ResourceClaim
// controller) of Kubernetes 1.37 on 127.0.0.1, and the DRA driver of one
// simulated node (--fake-gpus: one 16 GiB card) publishing its
// ResourceSlice. The supervisor also plays the node's kubelet for the
// claims: it calls the driver's socket (NodePrepareResources) for every
// claim allocated to a pod on the node, and NodeUnprepareResources once the
// pod is gone. It applies manifests/examples/dra/ one pod at a time, prints
// `kubectl inspect gpushare`, each claim's card, share and the environment
// the driver's CDI spec gives its container, and leaves the cluster running.
//
//	gpushare-dra-demo up       (make dra-demo)
//	gpushare-dra-demo status   report again
//	gpushare-dra-demo down     (make dra-demo-down)
//
// up builds what is missing (the 1.37 control plane: about 15 minutes on
// two cores the first time, then cached in ~/.cache/gpushare), then starts
// a supervisor process (`serve`, detached, in its own session) that owns
// every cluster process and the driver, and writes their PID files under
// _output/dra-demo; down stops exactly those processes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/supervisor"
)

const usage = `usage: gpushare-dra-demo <command> [flags]

Commands:
  up       build what is missing, start the cluster (or find it running), apply
           manifests/examples/dra/ and print the report and the KUBECONFIG line
  status   print the report of the running demo again
  down     stop every process the demo started
Flags:
`

// options are the flags shared by the commands.
type options struct {
	dir  string // state directory
	root string // repository root
	gpus string // the node's --fake-gpus
}

func main() {
	fs := flag.NewFlagSet("gpushare-dra-demo", flag.ExitOnError)
	var o options
	fs.StringVar(&o.dir, "dir", "", "state directory: PID files, logs, kubeconfigs, etcd data, the driver's directories (default <repo>/_output/dra-demo)")
	fs.StringVar(&o.gpus, "gpus", "1xTesla-T4:16GiB", "the simulated node's cards (the driver's --fake-gpus); the examples expect one 16 GiB card")
	os.Exit(supervisor.Main("dra-demo", fs, usage, os.Args[1:], o.setup, supervisor.Commands{
		Up:     func(ctx context.Context) error { return up(ctx, o) },
		Status: func(ctx context.Context) error { return status(ctx, o) },
		Down:   func(context.Context) error { return down(o) },
		Serve:  func(ctx context.Context) error { return serve(ctx, o) },
	}))
}

// setup finds the repository and the state directory.
func (o *options) setup() error {
	root, err := framework.RepoRoot()
	if err != nil {
		return fmt.Errorf("%w: run it inside the gpushare repository", err)
	}
	o.root = root
	o.dir, err = supervisor.StateDir(root, o.dir, "dra-demo")
	return err
}
