// Command ocibuild builds gpushare's container images: with docker (when a
// daemon answers), podman or buildah and build/*.Dockerfile, or, when none
// is usable, with no daemon at all by compiling each binary and writing an
// OCI image layout and archive under --out. `make images` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gpushare/gpushare/pkg/build/image"
)

func main() {
	fs := flag.NewFlagSet("ocibuild", flag.ExitOnError)
	cfg := image.Config{Runner: image.ExecRunner{}, Stdout: os.Stdout, Stderr: os.Stderr}
	builder := fs.String("builder", string(image.Auto), "auto (docker with a reachable daemon, else podman, else buildah, else go), docker, podman, buildah or go (the Go-native builder: no daemon, no registry)")
	fs.StringVar(&cfg.Version, "version", "dev", "version stamped into the binaries, the image tag and the org.opencontainers.image.version label")
	fs.StringVar(&cfg.Revision, "revision", "unknown", "commit for the org.opencontainers.image.revision label")
	fs.StringVar(&cfg.Prefix, "prefix", "", `prefix of the image names, e.g. "ghcr.io/acme/"`)
	fs.StringVar(&cfg.Out, "out", "_output/images", "where the Go-native builder writes NAME/ (OCI layout), NAME.tar (oci-archive) and bin/")
	fs.StringVar(&cfg.Dir, "dir", ".", "the repository root: the build context and where go build runs")
	fs.StringVar(&cfg.Go, "go", "go", "the go command")
	images := fs.String("images", "", "comma-separated image names to build; empty: all four")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nBuilds the gpushare-scheduler-extender, gpushare-device-plugin, kubectl-inspect-gpushare and gpushare-dra-driver images. Flags:\n", fs.Name())
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	cfg.Builder = image.Builder(*builder)
	if *images != "" {
		cfg.Images = strings.Split(*images, ",")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := image.Run(ctx, cfg)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ocibuild:", err)
		os.Exit(1)
	}
}
