// Command gpushare-device-plugin advertises a node's GPU memory to kubelet
// as aliyun.com/gpu-mem and pins every container to the card(s) that the
// gpushare scheduler extender chose for it.
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
	"github.com/gpushare/gpushare/pkg/signals"
	"github.com/gpushare/gpushare/pkg/version"
)

func main() {
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
	if err := deviceplugin.Run(ctx, cfg); err != nil {
		klog.Background().Error(err, "Device plugin failed")
		return 1
	}
	return 0
}
