// Command gpushare-simulate replays a trace of pods on a cluster with each
// allocator policy, to help choose one before deploying the extender. The
// replay is package simulator's; its flags are package cli's.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpushare/gpushare/pkg/simulator/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
