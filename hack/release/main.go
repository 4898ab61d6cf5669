// Command release writes a gpushare release into a directory: binaries for
// each platform, the kubectl plugin's archives and krew manifest, the four
// images' archives and SHA256SUMS. `make release VERSION=v0.x.y` runs it,
// after packaging the chart into the same directory. `release publish`
// pushes such a directory's images and chart to a registry: `make publish
// REGISTRY=HOST/ORG VERSION=v0.x.y` runs it after `make release`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpushare/gpushare/pkg/build/image"
	"github.com/gpushare/gpushare/pkg/build/publish"
	"github.com/gpushare/gpushare/pkg/build/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "publish" {
		err = runPublish(ctx, os.Args[2:])
	} else {
		err = runRelease(ctx, os.Args[1:])
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// runRelease writes a release.
func runRelease(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("release", flag.ExitOnError)
	cfg := release.Config{Runner: image.ExecRunner{}, Stdout: os.Stdout, Stderr: os.Stderr}
	fs.StringVar(&cfg.Version, "version", "", "the release version, vMAJOR.MINOR.PATCH[-PRERELEASE] (the git tag)")
	fs.StringVar(&cfg.Revision, "revision", "unknown", "the commit, for the images' revision label")
	platforms := fs.String("platforms", release.HostPlatform().String(), "comma-separated OS/ARCH to build the binaries and images for")
	fs.StringVar(&cfg.Dir, "dir", ".", "the repository root")
	fs.StringVar(&cfg.Out, "out", "_output/release", "the release directory")
	fs.StringVar(&cfg.Registry, "registry", "", "the registry the images are named for, HOST[:PORT][/PATH] (make publish pushes them there); empty: no registry in their names")
	urlBase := fs.String("url-base", "", "where the files will be downloaded from (krew manifest); default https://github.com/gpushare/gpushare/releases/download/VERSION/")
	fs.StringVar(&cfg.Go, "go", "go", "the go command")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: release [flags]\n       release publish [flags] (release publish -h: its flags)\n\nWrites a release into --out; publish pushes one to a registry. Flags:\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	var err error
	if cfg.Platforms, err = release.ParsePlatforms(*platforms); err != nil {
		return err
	}
	if cfg.Registry != "" {
		if err := publish.CheckRegistry(cfg.Registry); err != nil {
			return err
		}
	}
	cfg.URLBase = *urlBase
	if cfg.URLBase == "" {
		cfg.URLBase = "https://github.com/gpushare/gpushare/releases/download/" + cfg.Version + "/"
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	return release.Run(ctx, cfg)
}

// runPublish pushes a release's images and chart.
func runPublish(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("release publish", flag.ExitOnError)
	cfg := publish.Config{Stdout: os.Stdout}
	fs.StringVar(&cfg.Registry, "registry", "", "where to push, HOST[:PORT][/PATH], e.g. ghcr.io/gpushare: the images to REGISTRY/NAME:VERSION, the chart to REGISTRY/charts/gpushare:X.Y.Z (credentials: docker login's, ~/.docker/config.json)")
	fs.StringVar(&cfg.Version, "version", "", "the release version, vMAJOR.MINOR.PATCH[-PRERELEASE]")
	fs.StringVar(&cfg.Dir, "dir", "_output/release", "the release directory make release wrote for that registry")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: release publish [flags]\n\nPushes a release's four images and its chart to --registry. Flags:\n")
		fs.PrintDefaults()
	}
	_ = fs.Parse(args)
	p, err := publish.New(cfg)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}
