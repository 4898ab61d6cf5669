package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gpushare/gpushare/pkg/build/image"
	"github.com/gpushare/gpushare/pkg/build/oci"
	"github.com/gpushare/gpushare/pkg/build/release"
	"github.com/gpushare/gpushare/pkg/version"
)

// ChartRepository is the chart's repository under the registry:
// REGISTRY/charts/gpushare, installed as oci://REGISTRY/charts/gpushare.
const ChartRepository = "charts/gpushare"

// registryPattern is a registry and path to push under: a host (with an
// optional port), then lower-case path components, no scheme and no
// trailing slash, e.g. ghcr.io/gpushare or 127.0.0.1:5000/team.
var registryPattern = regexp.MustCompile(`^[a-zA-Z0-9.-]+(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)

// CheckRegistry checks that registry can prefix the images' names.
func CheckRegistry(registry string) error {
	if !registryPattern.MatchString(registry) {
		return fmt.Errorf("registry %q is not HOST[:PORT][/PATH] without a scheme or a trailing slash (e.g. ghcr.io/gpushare): set REGISTRY", registry)
	}
	return nil
}

// ImageRef is where an image of a release goes: REGISTRY/NAME:VERSION.
func ImageRef(registry, imageName, version string) string {
	return registry + "/" + imageName + ":" + version
}

// ChartURL is what `helm install` names the published chart by:
// oci://REGISTRY/charts/gpushare (with --version X.Y.Z).
func ChartURL(registry string) string { return "oci://" + registry + "/" + ChartRepository }

// Config configures a Publisher.
type Config struct {
	// Registry is where everything goes, HOST[:PORT][/PATH] (CheckRegistry),
	// e.g. ghcr.io/gpushare: REGISTRY/NAME:VERSION for the images and
	// REGISTRY/charts/gpushare:X.Y.Z for the chart.
	Registry string
	// Version is the release's, vMAJOR.MINOR.PATCH[-PRERELEASE].
	Version string
	// Dir is the release directory `make release` wrote for Registry: the
	// image archives NAME_VERSION_OS_ARCH.image.tar and the chart package
	// gpushare-X.Y.Z.tgz.
	Dir string
	// Remote are go-containerregistry's options for every request, after
	// the Docker keychain (what `docker login` or a CI step writes to
	// ~/.docker/config.json) and before the context.
	Remote []remote.Option
	// Stdout gets one line per push and the install command.
	Stdout io.Writer
}

// Publisher pushes one release; New finds and checks its files.
type Publisher struct {
	cfg Config
	// images are the four images, each with its platforms.
	images []imageSet
	// chart is the release's chart package.
	chart chartPackage
}

// imageSet is one image of the release for each platform it was built for.
type imageSet struct {
	name string
	// archives are platform -> the image archive of the release.
	archives map[release.Platform]string
}

// New checks cfg and finds the release's files: an archive of each of the
// four images for the same platforms, and the chart package, whose images
// default to cfg.Registry.
func New(cfg Config) (*Publisher, error) {
	if err := CheckRegistry(cfg.Registry); err != nil {
		return nil, err
	}
	chartVersion, err := version.Chart(cfg.Version)
	if err != nil {
		return nil, err
	}
	if cfg.Stdout == nil {
		cfg.Stdout = io.Discard
	}
	p := &Publisher{cfg: cfg}
	var platforms []release.Platform
	for i, r := range image.Recipes() {
		set, err := findArchives(cfg.Dir, r.Name, cfg.Version)
		if err != nil {
			return nil, err
		}
		got := set.platforms()
		if i == 0 {
			platforms = got
		} else if !slices.Equal(platforms, got) {
			return nil, fmt.Errorf("release %s holds %s for %v but %s for %v: make release again for one set of PLATFORMS",
				cfg.Dir, image.Recipes()[0].Name, platforms, r.Name, got)
		}
		p.images = append(p.images, set)
	}
	if p.chart, err = readChart(filepath.Join(cfg.Dir, "gpushare-"+chartVersion+".tgz")); err != nil {
		return nil, err
	}
	if p.chart.version != chartVersion {
		return nil, fmt.Errorf("chart package %s is version %q, want %s", p.chart.path, p.chart.version, chartVersion)
	}
	if want := cfg.Registry + "/"; strings.TrimSuffix(p.chart.registry, "/")+"/" != want {
		return nil, fmt.Errorf("chart package %s pulls its images from image.registry %q, not from %q where they are pushed: make release REGISTRY=%s VERSION=%s (make publish does)",
			p.chart.path, p.chart.registry, want, cfg.Registry, cfg.Version)
	}
	return p, nil
}

// findArchives finds the release's archives of image imageName.
func findArchives(dir, imageName, ver string) (imageSet, error) {
	prefix := imageName + "_" + ver + "_"
	const suffix = ".image.tar"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return imageSet{}, fmt.Errorf("reading the release directory: %w (run make release first)", err)
	}
	set := imageSet{name: imageName, archives: map[release.Platform]string{}}
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || !strings.HasSuffix(rest, suffix) {
			continue
		}
		goos, goarch, ok := strings.Cut(strings.TrimSuffix(rest, suffix), "_")
		if !ok || goos == "" || goarch == "" {
			continue
		}
		set.archives[release.Platform{OS: goos, Arch: goarch}] = filepath.Join(dir, e.Name())
	}
	if len(set.archives) == 0 {
		return imageSet{}, fmt.Errorf("release %s has no image archive of %s %s (%s): make release VERSION=%s first",
			dir, imageName, ver, release.ImageName(imageName, ver, release.Platform{OS: "OS", Arch: "ARCH"}), ver)
	}
	return set, nil
}

// platforms are the set's platforms, sorted.
func (s imageSet) platforms() []release.Platform {
	out := make([]release.Platform, 0, len(s.archives))
	for p := range s.archives {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b release.Platform) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// Run pushes the four images, each as one image or, built for several
// platforms, as an OCI image index of them, then the chart, and prints the
// command that installs it.
func (p *Publisher) Run(ctx context.Context) error {
	opts := append([]remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain), remote.WithUserAgent("gpushare-publish")}, p.cfg.Remote...)
	opts = append(opts, remote.WithContext(ctx))
	work, err := os.MkdirTemp("", "gpushare-publish-")
	if err != nil {
		return fmt.Errorf("creating a work directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(work) }()
	for _, set := range p.images {
		if err := p.pushImage(set, filepath.Join(work, set.name), opts); err != nil {
			return err
		}
	}
	ref, digest, err := pushChart(p.cfg.Registry, p.chart, opts)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(p.cfg.Stdout, "pushed %s %s (Helm chart)\n", ref, digest)
	_, _ = fmt.Fprintf(p.cfg.Stdout, "install it with: helm install gpushare %s --version %s -n kube-system\n", ChartURL(p.cfg.Registry), p.chart.version)
	return nil
}

// pushImage pushes one image of the release, unpacking its archives under
// work.
func (p *Publisher) pushImage(set imageSet, work string, opts []remote.Option) error {
	ref, err := name.NewTag(ImageRef(p.cfg.Registry, set.name, p.cfg.Version))
	if err != nil {
		return fmt.Errorf("naming %s: %w", set.name, err)
	}
	platforms := set.platforms()
	images := make([]v1.Image, len(platforms))
	for i, pl := range platforms {
		if images[i], err = readArchive(set.archives[pl], filepath.Join(work, pl.OS+"-"+pl.Arch), pl); err != nil {
			return err
		}
	}
	var digest v1.Hash
	if len(images) == 1 {
		if err := remote.Write(ref, images[0], opts...); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
		digest, err = images[0].Digest()
	} else {
		idx := Index(images, platforms)
		if err := remote.WriteIndex(ref, idx, opts...); err != nil {
			return fmt.Errorf("pushing %s: %w", ref, err)
		}
		digest, err = idx.Digest()
	}
	if err != nil {
		return fmt.Errorf("digest of %s: %w", ref, err)
	}
	kind := "image"
	if len(images) > 1 {
		kind = "image index"
	}
	_, _ = fmt.Fprintf(p.cfg.Stdout, "pushed %s %s (%s: %v)\n", ref, digest, kind, platforms)
	return nil
}

// Index is the OCI image index of images, each described by its platform.
func Index(images []v1.Image, platforms []release.Platform) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for i, img := range images {
		pl := v1.Platform{OS: platforms[i].OS, Architecture: platforms[i].Arch}
		if pl.Architecture == "arm64" {
			pl.Variant = "v8"
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &pl}})
	}
	return idx
}

// readArchive unpacks the release's image archive at path into dir and
// returns its image, verified, checking that it is for platform pl.
func readArchive(path, dir string, pl release.Platform) (v1.Image, error) {
	f, err := os.Open(path) //nolint:gosec // the release's own file
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer func() { _ = f.Close() }()
	if err := oci.Unarchive(f, dir); err != nil {
		return nil, fmt.Errorf("unpacking %s: %w", path, err)
	}
	l, err := oci.Read(dir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	if l.Config.OS != pl.OS || l.Config.Architecture != pl.Arch {
		return nil, fmt.Errorf("image archive %s holds an image for %s/%s", path, l.Config.OS, l.Config.Architecture)
	}
	return l.Image, nil
}

// errNoChart is wrapped when the chart package lacks a file.
var errNoChart = errors.New("not a gpushare chart package")
