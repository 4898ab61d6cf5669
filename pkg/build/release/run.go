package release

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/pkg/build/image"
	"github.com/gpushare/gpushare/pkg/version"
)

// Config configures Run.
type Config struct {
	// Version is the release version, vMAJOR.MINOR.PATCH[-PRE].
	Version string
	// Revision is the commit, for the images' revision label.
	Revision string
	// Platforms get a binary of each component (and an archive of the
	// kubectl plugin).
	Platforms []Platform
	// Dir is the repository root.
	Dir string
	// Out is the release directory; Run adds its files and SHA256SUMS,
	// which covers whatever else is there (the chart package).
	Out string
	// URLBase is where the files will be downloaded from, for the krew
	// manifest, e.g. https://github.com/gpushare/gpushare/releases/download/v0.1.0/.
	URLBase string
	// Registry names the images in their archives, REGISTRY/NAME:VERSION
	// (e.g. ghcr.io/gpushare), as `make publish` pushes them and the
	// release's chart pulls them; empty: NAME:VERSION.
	Registry string
	// Go is the go command.
	Go string
	// Runner runs go.
	Runner image.Runner
	// Stdout gets one line per file, Stderr the builds' output.
	Stdout, Stderr io.Writer
}

// Run writes the release's binaries (the simulator's too), the kubectl
// plugin's archives and krew manifest, the four images for every platform
// (the Go-native builder's packing of those binaries), and SHA256SUMS into
// cfg.Out. Built for one platform, it says how to add the others.
func Run(ctx context.Context, cfg Config) error {
	if _, err := version.Chart(cfg.Version); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil { //nolint:gosec // G301: release files are public
		return fmt.Errorf("creating %s: %w", cfg.Out, err)
	}
	host := HostPlatform()
	// Before minutes of building: every C cross compiler cgo will need.
	for _, r := range binaries() {
		for _, p := range cfg.Platforms {
			if r.CGO {
				if _, err := cfg.crossCompiler(r, host, p); err != nil {
					return err
				}
			}
		}
	}
	var krew []KrewArchive
	for _, r := range binaries() {
		for _, p := range cfg.Platforms {
			bin, err := cfg.build(ctx, r, host, p)
			if err != nil {
				return err
			}
			if r.Name != pluginBinary {
				continue
			}
			a, err := cfg.pluginArchive(bin, p)
			if err != nil {
				return err
			}
			krew = append(krew, a)
		}
	}
	manifest, err := KrewManifest(cfg.Version, cfg.URLBase, krew)
	if err != nil {
		return err
	}
	if err := cfg.write(KrewPluginName+".yaml", manifest); err != nil {
		return err
	}
	if err := cfg.images(); err != nil {
		return err
	}
	sums, err := Checksums(cfg.Out)
	if err != nil {
		return err
	}
	if err := cfg.write(ChecksumsFile, sums); err != nil {
		return err
	}
	if len(cfg.Platforms) == 1 {
		_, _ = fmt.Fprintln(cfg.Stdout, MorePlatformsHint(cfg.Platforms[0]))
	}
	return nil
}

// MorePlatformsHint is the line a release built for p alone ends with:
// how to build the other platforms too, and the C cross compiler each
// needs.
func MorePlatformsHint(p Platform) string {
	all := []string{p.String()}
	var compilers []string
	for _, o := range KnownPlatforms() {
		if o == p {
			continue
		}
		all = append(all, o.String())
		if cc, err := CrossCompiler(p, o); err == nil && cc != "" {
			compilers = append(compilers, "gcc-"+strings.TrimSuffix(cc, "-gcc"))
		}
	}
	return fmt.Sprintf("release: built for %s only (this host's platform); for more: make release PLATFORMS=%s (the device plugin and the DRA driver need cgo: apt-get install %s)",
		p, strings.Join(all, ","), strings.Join(compilers, " "))
}

// simulator is the one release binary without an image: gpushare-simulate,
// which an operator runs on a workstation to choose a policy before
// deploying (docs/design/policies.md).
var simulator = image.Recipe{Name: "gpushare-simulate", Package: "./simulator",
	Description: "gpushare-simulate: replays a trace of pods with each placement policy"}

// binaries are the programs a release builds for every platform: the
// images' four and the simulator.
func binaries() []image.Recipe { return append(image.Recipes(), simulator) }

// build compiles r for p into the release directory.
func (cfg Config) build(ctx context.Context, r image.Recipe, host, p Platform) (string, error) {
	out, err := filepath.Abs(filepath.Join(cfg.Out, BinaryName(r.Name, cfg.Version, p)))
	if err != nil {
		return "", fmt.Errorf("locating %s: %w", cfg.Out, err)
	}
	env := append(r.GoEnv(), "GOOS="+p.OS, "GOARCH="+p.Arch)
	if r.CGO {
		cc, err := cfg.crossCompiler(r, host, p)
		if err != nil {
			return "", err
		}
		if cc != "" {
			env = append(env, "CC="+cc)
		}
	}
	c := image.Command{Dir: r.Dir(cfg.Dir), Env: env, Name: cfg.Go, Args: r.GoArgs(cfg.Version, out)}
	if err := cfg.Runner.Run(ctx, c, cfg.Stderr, cfg.Stderr); err != nil {
		return "", fmt.Errorf("building %s for %s (%s): %w", r.Name, p, c, err)
	}
	_, _ = fmt.Fprintln(cfg.Stdout, out)
	return out, nil
}

// crossCompiler is the C compiler r needs for p (empty for the host's own
// platform), found on PATH.
func (cfg Config) crossCompiler(r image.Recipe, host, p Platform) (string, error) {
	cc, err := CrossCompiler(host, p)
	if err != nil {
		return "", fmt.Errorf("%s for %s: %w", r.Name, p, err)
	}
	if cc == "" {
		return "", nil
	}
	if _, err := cfg.Runner.LookPath(cc); err != nil {
		return "", fmt.Errorf("%s for %s needs cgo and the C cross compiler %s, which is not on PATH: install it (apt-get install %s) or leave %s out (make release PLATFORMS=%s)",
			r.Name, p, cc, "gcc-"+strings.TrimSuffix(cc, "-gcc"), p, host)
	}
	return cc, nil
}

// pluginArchive packs the kubectl plugin's binary for p with the license,
// as krew downloads it.
func (cfg Config) pluginArchive(bin string, p Platform) (KrewArchive, error) {
	name := ArchiveName(pluginBinary, cfg.Version, p)
	path := filepath.Join(cfg.Out, name)
	f, err := os.Create(path) //nolint:gosec // the release directory
	if err != nil {
		return KrewArchive{}, fmt.Errorf("creating %s: %w", path, err)
	}
	err = TarGz(f, []ArchiveFile{
		{Name: pluginBinary, Source: bin, Mode: 0o755},
		{Name: "LICENSE", Source: filepath.Join(cfg.Dir, "LICENSE"), Mode: 0o644},
	})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return KrewArchive{}, fmt.Errorf("writing %s: %w", path, err)
	}
	sum, err := FileSHA256(path)
	if err != nil {
		return KrewArchive{}, err
	}
	_, _ = fmt.Fprintln(cfg.Stdout, path)
	return KrewArchive{Platform: p, Name: name, SHA256: sum}, nil
}

// images packs the four images for every platform from the binaries
// build wrote (as `make images` packs them) and keeps their archives under
// release names.
func (cfg Config) images() error {
	work := filepath.Join(cfg.Out, ".images")
	defer func() { _ = os.RemoveAll(work) }()
	prefix := ""
	if cfg.Registry != "" {
		prefix = strings.TrimSuffix(cfg.Registry, "/") + "/"
	}
	for _, r := range image.Recipes() {
		for _, p := range cfg.Platforms {
			bin := filepath.Join(cfg.Out, BinaryName(r.Name, cfg.Version, p))
			res, err := image.Pack(r, bin, image.PackOptions{
				Version: cfg.Version, Revision: cfg.Revision, Prefix: prefix, Out: filepath.Join(work, p.OS+"-"+p.Arch),
			})
			if err != nil {
				return fmt.Errorf("packing the image of %s for %s: %w", r.Name, p, err)
			}
			if got := res.Manifest.Platform; got == nil || got.OS != p.OS || got.Architecture != p.Arch {
				return fmt.Errorf("the image of %s for %s holds a binary for %v: go build ignored GOOS/GOARCH", r.Name, p, got)
			}
			dst := filepath.Join(cfg.Out, ImageName(r.Name, cfg.Version, p))
			if err := os.Rename(res.Archive, dst); err != nil {
				return fmt.Errorf("keeping the image archive of %s: %w", r.Name, err)
			}
			_, _ = fmt.Fprintln(cfg.Stdout, dst)
		}
	}
	return nil
}

// write writes a release file.
func (cfg Config) write(name string, data []byte) error {
	p := filepath.Join(cfg.Out, name)
	if err := os.WriteFile(p, data, 0o644); err != nil { //nolint:gosec // release files are public
		return fmt.Errorf("writing %s: %w", p, err)
	}
	_, _ = fmt.Fprintln(cfg.Stdout, p)
	return nil
}

// errNoPlatforms is returned for an empty platform list.
var errNoPlatforms = errors.New("no platforms to build for")

// Validate checks cfg before anything is built.
func (cfg Config) Validate() error {
	if len(cfg.Platforms) == 0 {
		return errNoPlatforms
	}
	if slices.ContainsFunc(cfg.Platforms, func(p Platform) bool { return p.OS != "linux" }) {
		return fmt.Errorf("platforms %v: the components run on Linux nodes; build linux/* only", cfg.Platforms)
	}
	_, err := version.Chart(cfg.Version)
	return err
}
