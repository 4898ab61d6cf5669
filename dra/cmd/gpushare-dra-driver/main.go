// Command gpushare-dra-driver publishes a node's GPUs as Dynamic Resource
// Allocation devices with consumable memory capacity and prepares the
// claims kube-scheduler allocates on them (package driver).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/dra/pkg/driver"
	"github.com/gpushare/gpushare/pkg/memlimit"
	"github.com/gpushare/gpushare/pkg/version"
)

func main() {
	cfg, showVersion, err := driver.ParseFlags(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return
	case err != nil:
		os.Exit(2)
	case showVersion:
		fmt.Println(version.Version)
		return
	}
	os.Exit(run(cfg))
}

// run serves until SIGTERM or an error and returns the exit status.
func run(cfg driver.Config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer klog.Flush()
	memlimit.Apply(klog.Background(), os.DirFS("/"), os.Getenv, memlimit.DefaultFraction)
	if err := driver.Run(ctx, cfg); err != nil {
		klog.Background().Error(err, "DRA driver failed")
		return 1
	}
	return 0
}
