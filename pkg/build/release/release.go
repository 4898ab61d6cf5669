package release

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Platform is an operating system and CPU in GOOS and GOARCH spelling.
type Platform struct {
	OS, Arch string
}

// String is "OS/ARCH", e.g. "linux/amd64".
func (p Platform) String() string { return p.OS + "/" + p.Arch }

// ParsePlatforms parses a comma-separated list of OS/ARCH pairs.
func ParsePlatforms(s string) ([]Platform, error) {
	var out []Platform
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		goos, goarch, ok := strings.Cut(f, "/")
		if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
			return nil, fmt.Errorf("platform %q is not OS/ARCH (e.g. linux/amd64)", f)
		}
		p := Platform{OS: goos, Arch: goarch}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("platform %s given twice", p)
		}
		out = append(out, p)
	}
	return out, nil
}

// BinaryName is a released binary's file name: NAME_VERSION_OS_ARCH.
func BinaryName(name, version string, p Platform) string {
	return fmt.Sprintf("%s_%s_%s_%s", name, version, p.OS, p.Arch)
}

// ArchiveName is the name of the kubectl plugin's archive for p (what krew
// downloads): NAME_VERSION_OS_ARCH.tar.gz.
func ArchiveName(name, version string, p Platform) string {
	return BinaryName(name, version, p) + ".tar.gz"
}

// ImageName is an image archive's file name (an oci-archive with
// manifest.json, for docker load, podman load, skopeo and ctr import):
// NAME_VERSION_OS_ARCH.image.tar.
func ImageName(name, version string, p Platform) string {
	return BinaryName(name, version, p) + ".image.tar"
}

// ArchiveFile is one file of an archive.
type ArchiveFile struct {
	// Name is its path in the archive.
	Name string
	// Source is the host file it is read from.
	Source string
	// Mode is its permission bits.
	Mode int64
}

// TarGz writes files to w as a gzip-compressed tar, in the given order,
// owned by 0:0 with the Unix epoch as mtime and no gzip name or time, so
// the same files give the same bytes.
func TarGz(w io.Writer, files []ArchiveFile) error {
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	for _, f := range files {
		if err := addFile(tw, f); err != nil {
			return fmt.Errorf("archiving %s: %w", f.Source, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing the tar: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("closing the gzip stream: %w", err)
	}
	return nil
}

// addFile writes f into tw.
func addFile(tw *tar.Writer, f ArchiveFile) error {
	src, err := os.Open(f.Source)
	if err != nil {
		return err
	}
	defer func() { _ = src.Close() }()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file (%v)", fi.Mode())
	}
	hdr := &tar.Header{Name: f.Name, Mode: f.Mode, Size: fi.Size(), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg, Format: tar.FormatUSTAR}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	_, err = io.Copy(tw, src)
	return err
}

// ChecksumsFile is the name of the checksum list.
const ChecksumsFile = "SHA256SUMS"

// Checksums lists the SHA-256 of every regular file directly in dir but
// ChecksumsFile, sorted by name, as `sha256sum` prints them ("HEX  NAME"),
// so that `sha256sum -c SHA256SUMS` checks them.
func Checksums(dir string) ([]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	var b strings.Builder
	for _, e := range entries { // sorted by name
		if !e.Type().IsRegular() || e.Name() == ChecksumsFile {
			continue
		}
		sum, err := FileSHA256(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, e.Name())
	}
	return []byte(b.String()), nil
}

// FileSHA256 is the hex SHA-256 of the file p.
func FileSHA256(p string) (string, error) {
	f, err := os.Open(p) //nolint:gosec // release files this package lists
	if err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// KrewArchive is one platform's archive of the kubectl plugin.
type KrewArchive struct {
	Platform Platform
	// Name is its file name, under the release's download URL.
	Name string
	// SHA256 is its hex digest.
	SHA256 string
}

// The kubectl plugin as krew knows it. krew links a plugin named
// inspect-gpushare as kubectl-inspect_gpushare, so it runs as `kubectl
// inspect-gpushare`; the binary copied onto PATH under its own name runs
// as `kubectl inspect gpushare`.
const (
	KrewPluginName = "inspect-gpushare"
	pluginBinary   = "kubectl-inspect-gpushare"
	homepage       = "https://github.com/gpushare/gpushare"
)

// krewPlugin is krew's Plugin manifest (krew.googlecontainertools.github.com/v1alpha2).
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string         `json:"version"`
		Homepage         string         `json:"homepage"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Platforms        []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

type krewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string `json:"uri"`
	SHA256 string `json:"sha256"`
	Bin    string `json:"bin"`
}

// KrewManifest is the krew plugin manifest of the kubectl plugin at
// version, each platform's archive downloaded from urlBase + its name.
func KrewManifest(version, urlBase string, archives []KrewArchive) ([]byte, error) {
	if len(archives) == 0 {
		return nil, fmt.Errorf("a krew manifest needs at least one archive")
	}
	var m krewPlugin
	m.APIVersion = "krew.googlecontainertools.github.com/v1alpha2"
	m.Kind = "Plugin"
	m.Metadata.Name = KrewPluginName
	m.Spec.Version = version
	m.Spec.Homepage = homepage
	m.Spec.ShortDescription = "Show GPU memory shared by pods, per node and card"
	m.Spec.Description = "Shows every node's GPU cards, the memory (aliyun.com/gpu-mem) each pod holds on\n" +
		"each card, unhealthy and cordoned cards, and pending GPU pods with the\n" +
		"scheduler's reason, computed with the gpushare scheduler extender's own code.\n"
	for _, a := range archives {
		if len(a.SHA256) != 64 {
			return nil, fmt.Errorf("archive %s: sha256 %q is not 64 hex digits", a.Name, a.SHA256)
		}
		var p krewPlatform
		p.Selector.MatchLabels = map[string]string{"os": a.Platform.OS, "arch": a.Platform.Arch}
		p.URI = strings.TrimSuffix(urlBase, "/") + "/" + a.Name
		p.SHA256 = a.SHA256
		p.Bin = pluginBinary
		m.Spec.Platforms = append(m.Spec.Platforms, p)
	}
	out, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encoding the krew manifest: %w", err)
	}
	return out, nil
}

// HostPlatform is the build host's platform.
func HostPlatform() Platform { return Platform{OS: runtime.GOOS, Arch: runtime.GOARCH} }

// crossTriplets are the platforms whose C cross compiler is known, by
// Debian's name for it (gcc-<triplet>).
var crossTriplets = map[Platform]string{
	{OS: "linux", Arch: "amd64"}: "x86_64-linux-gnu",
	{OS: "linux", Arch: "arm64"}: "aarch64-linux-gnu",
}

// KnownPlatforms are the platforms a release can build for (a C cross
// compiler is known for each), sorted.
func KnownPlatforms() []Platform {
	out := make([]Platform, 0, len(crossTriplets))
	for p := range crossTriplets {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b Platform) int { return strings.Compare(a.String(), b.String()) })
	return out
}

// CrossCompiler is the C compiler cgo needs to build for target on host:
// empty when they are the same platform; else the Debian cross compiler's
// name (apt-get install gcc-<triplet>).
func CrossCompiler(host, target Platform) (string, error) {
	if host == target {
		return "", nil
	}
	t, ok := crossTriplets[target]
	if !ok {
		return "", fmt.Errorf("no known C cross compiler for %s (the device plugin needs cgo)", target)
	}
	return t + "-gcc", nil
}
