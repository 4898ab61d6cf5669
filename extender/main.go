// Command gpushare-scheduler-extender is the kube-scheduler extender that
// places pods asking aliyun.com/gpu-mem on single GPU cards.
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

	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/memlimit"
	"github.com/gpushare/gpushare/pkg/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "simulate" {
		fmt.Fprintln(os.Stderr, "the simulate subcommand is a program of its own now: gpushare-simulate, with the same flags (make build writes bin/gpushare-simulate)")
		os.Exit(2)
	}
	cfg, showVersion, err := extender.ParseFlags(os.Args[1:], os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return
	case err != nil:
		os.Exit(2)
	case showVersion:
		fmt.Println(version.Version)
		return
	}
	if err := run(cfg); err != nil {
		klog.Background().Error(err, "Extender failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

// run serves until SIGINT or SIGTERM.
func run(cfg extender.Config) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	memlimit.Apply(klog.Background(), os.DirFS("/"), os.Getenv, memlimit.DefaultFraction)
	ctx = klog.NewContext(ctx, klog.Background())
	e, err := extender.New(ctx, cfg)
	if err != nil {
		return err
	}
	return e.Run(ctx)
}
