// Command kubectl-inspect-gpushare is the kubectl plugin "kubectl inspect
// gpushare": on PATH, kubectl runs it for that subcommand. It shows the GPU
// memory allocated on every card of every GPU-sharing node.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/inspect"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := inspect.Main(klog.NewContext(ctx, klog.Background()), inspect.Env{
		Args:    os.Args[1:],
		Streams: genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr},
		TTY:     isTerminal(os.Stdout),
	})
	stop()
	klog.Flush()
	os.Exit(code)
}

// isTerminal reports whether f is a character device (a terminal), not a
// pipe or a file.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
