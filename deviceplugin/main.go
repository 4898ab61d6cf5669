// Command gpushare-device-plugin advertises a node's GPU memory to kubelet
// as aliyun.com/gpu-mem and pins every container to the card(s) that the
// gpushare scheduler extender chose for it. `gpushare-device-plugin
// mps-daemons` runs mps mode's MPS control daemons in a container of their
// own, so that they outlive the plugin's restarts.
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

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/memlimit"
	"github.com/gpushare/gpushare/pkg/signals"
	"github.com/gpushare/gpushare/pkg/version"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == deviceplugin.MPSDaemonsCommand {
		os.Exit(runMPSDaemons(os.Args[2:]))
	}
	cfg, showVersion, err := deviceplugin.ParseFlags(os.Args[1:], os.Stderr)
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
func run(cfg deviceplugin.Config) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg.Restart = signals.Hangups(ctx)
	defer klog.Flush()
	memlimit.Apply(klog.Background(), os.DirFS("/"), os.Getenv, memlimit.DefaultFraction)
	p, err := deviceplugin.New(ctx, cfg)
	if err == nil {
		err = p.Run(ctx)
	}
	if err != nil {
		klog.Background().Error(err, "Device plugin failed")
		return 1
	}
	return 0
}

// runMPSDaemons runs mps mode's daemons (the mps-daemons command) until
// SIGTERM and returns the exit status.
func runMPSDaemons(args []string) int {
	cfg, err := deviceplugin.ParseMPSDaemonsFlags(args, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 0
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer klog.Flush()
	if err := deviceplugin.RunMPSDaemons(ctx, cfg); err != nil {
		klog.Background().Error(err, "MPS daemons failed")
		return 1
	}
	return 0
}
