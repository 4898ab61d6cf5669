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
	"os/signal"
	"syscall"

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

func main() { os.Exit(run()) }

func run() int {
	fs := flag.NewFlagSet("gpushare-node-demo", flag.ExitOnError)
	var o options
	fs.StringVar(&o.dir, "dir", "", "state directory: PID file, logs, kubeconfigs (default <repo>/_output/node-demo)")
	cmd, exit, err := supervisor.ParseCommand(fs, usage, os.Args[1:])
	if err != nil {
		return fail(err)
	}
	if cmd == "" {
		return exit
	}
	root, err := chart.RepoRoot()
	if err != nil {
		return fail(fmt.Errorf("%w: run it inside the gpushare repository", err))
	}
	o.root = root
	if o.dir, err = supervisor.StateDir(root, o.dir, "node-demo"); err != nil {
		return fail(err)
	}
	if os.Geteuid() != 0 {
		return fail(errors.New("the real node needs root (containerd, runc, kubelet, iptables, mounts)"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case "up":
		err = up(ctx, o)
	case "status":
		err = status(ctx, o)
	case "down":
		err = down(ctx, o)
	case "serve":
		err = serve(ctx, o)
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

// fail prints err as one message and returns the exit status 1.
func fail(err error) int {
	fmt.Fprintln(os.Stderr, "node-demo:", err)
	return 1
}
