// Command release writes a gpushare release into a directory: binaries for
// each platform, the kubectl plugin's archives and krew manifest, the four
// image archives and SHA256SUMS. `make release VERSION=v0.x.y` runs it,
// after packaging the chart into the same directory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpushare/gpushare/pkg/build/image"
	"github.com/gpushare/gpushare/pkg/build/release"
)

func main() {
	fs := flag.NewFlagSet("release", flag.ExitOnError)
	cfg := release.Config{Runner: image.ExecRunner{}, Stdout: os.Stdout, Stderr: os.Stderr}
	fs.StringVar(&cfg.Version, "version", "", "the release version, vMAJOR.MINOR.PATCH[-PRERELEASE] (the git tag)")
	fs.StringVar(&cfg.Revision, "revision", "unknown", "the commit, for the images' revision label")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated OS/ARCH to build the binaries for")
	fs.StringVar(&cfg.Dir, "dir", ".", "the repository root")
	fs.StringVar(&cfg.Out, "out", "_output/release", "the release directory")
	urlBase := fs.String("url-base", "", "where the files will be downloaded from (krew manifest); default https://github.com/gpushare/gpushare/releases/download/VERSION/")
	fs.StringVar(&cfg.Go, "go", "go", "the go command")
	_ = fs.Parse(os.Args[1:])
	var err error
	if cfg.Platforms, err = release.ParsePlatforms(*platforms); err != nil {
		fail(err)
	}
	cfg.URLBase = *urlBase
	if cfg.URLBase == "" {
		cfg.URLBase = "https://github.com/gpushare/gpushare/releases/download/" + cfg.Version + "/"
	}
	if err := cfg.Validate(); err != nil {
		fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = release.Run(ctx, cfg)
	stop()
	if err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}
