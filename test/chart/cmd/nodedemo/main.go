// Command gpushare-node-demo runs gpushare on a real node on this machine
// (root, Linux; no GPU): a control plane, one node with containerd, runc,
// CNI and kubelet (test/node), the chart installed with `helm install` in
// the second-scheduler topology with images from `make images` and the
// device plugin on two simulated 16 GiB cards, and three GPU pods of the
// probe image asking 4, 8 and 12 GiB. It prints `kubectl inspect gpushare`,
// each pod's card by its annotation beside the card its container sees,
// and a line KUBECONFIG=<path>, and leaves everything running.
//
//	gpushare-node-demo up       (make node-demo)
//	gpushare-node-demo status   report again
//	gpushare-node-demo down     (make node-demo-down)
//
// up starts a supervisor process (`serve`, in its own session) that owns
// every process of the cluster; down stops it, which tears the node down,
// then cleans up after a supervisor that died (test/node.Cleanup).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/gpushare/gpushare/test/chart"
	"github.com/gpushare/gpushare/test/supervisor"
)

const usage = `usage: gpushare-node-demo <command> [flags]

Commands:
  up       build what is missing, start the real node with the chart and GPU
           pods (or find it running), print the report and the KUBECONFIG line
  status   print the report of the running demo again
  down     stop every process the demo started and tear the node down
Flags:
`

// options are the flags shared by the commands.
type options struct {
	dir  string // state directory
	root string // repository root
}

func main() {
	fs := flag.NewFlagSet("gpushare-node-demo", flag.ExitOnError)
	var o options
	fs.StringVar(&o.dir, "dir", "", "state directory: PID file, logs, kubeconfigs (default <repo>/_output/node-demo)")
	os.Exit(supervisor.Main("node-demo", fs, usage, os.Args[1:], o.setup, supervisor.Commands{
		Up:     func(ctx context.Context) error { return up(ctx, o) },
		Status: func(ctx context.Context) error { return status(ctx, o) },
		Down:   func(ctx context.Context) error { return down(ctx, o) },
		Serve:  func(ctx context.Context) error { return serve(ctx, o) },
	}))
}

// setup finds the repository and the state directory, and checks that it
// runs as root.
func (o *options) setup() error {
	root, err := chart.RepoRoot()
	if err != nil {
		return fmt.Errorf("%w: run it inside the gpushare repository", err)
	}
	o.root = root
	if o.dir, err = supervisor.StateDir(root, o.dir, "node-demo"); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("the real node needs root (containerd, runc, kubelet, iptables, mounts)")
	}
	return nil
}
