package publish

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/gpushare/gpushare/pkg/build/image"
	"github.com/gpushare/gpushare/pkg/build/oci"
	"github.com/gpushare/gpushare/pkg/build/release"
)

var (
	amd64 = release.Platform{OS: "linux", Arch: "amd64"}
	arm64 = release.Platform{OS: "linux", Arch: "arm64"}
)

// serve starts a real OCI registry (go-containerregistry's) on loopback
// and returns its host:port.
func serve(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

// fakeRelease writes a release directory for version: an image archive
// of each of the four images for each platform (a one-file image of that
// platform, named under registry) and a chart package whose images
// default to chartRegistry. It returns platform -> image name -> the
// archived image's manifest digest.
func fakeRelease(t *testing.T, dir, version, registry, chartRegistry string, platforms ...release.Platform) map[release.Platform]map[string]v1.Hash {
	t.Helper()
	digests := map[release.Platform]map[string]v1.Hash{}
	for _, p := range platforms {
		digests[p] = map[string]v1.Hash{}
		for _, r := range image.Recipes() {
			layout := filepath.Join(t.TempDir(), "layout")
			desc, err := oci.Write(layout, oci.Image{
				Ref:      registry + "/" + r.Name + ":" + version,
				Platform: v1.Platform{OS: p.OS, Architecture: p.Arch},
				Config:   v1.Config{Entrypoint: []string{r.Binary()}},
				Layers:   [][]oci.Entry{{oci.File(r.Binary(), 0o755, []byte(r.Name+" for "+p.String()))}},
			})
			if err != nil {
				t.Fatal(err)
			}
			digests[p][r.Name] = desc.Digest
			f, err := os.Create(filepath.Join(dir, release.ImageName(r.Name, version, p)))
			if err != nil {
				t.Fatal(err)
			}
			if err := oci.Archive(f, layout); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	chartVersion := strings.TrimPrefix(version, "v")
	writeChart(t, filepath.Join(dir, "gpushare-"+chartVersion+".tgz"), map[string]string{
		"gpushare/Chart.yaml":  "apiVersion: v2\nname: gpushare\nversion: " + chartVersion + "\nappVersion: " + version + "\ndescription: GPU sharing\n",
		"gpushare/values.yaml": "# the images\nimage:\n  # where from\n  registry: " + chartRegistry + "\ntopology: second-scheduler\n",
	})
	return digests
}

// writeChart writes a gzipped tar of files at p.
func writeChart(t *testing.T, p string, files map[string]string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	tw := tar.NewWriter(zw)
	for _, n := range []string{"gpushare/Chart.yaml", "gpushare/values.yaml"} {
		data, ok := files[n]
		if !ok {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRun publishes a release into a real registry on loopback, once
// built for two platforms and once for one: each image is an OCI index
// of its platforms' images, or the one image, with the digests the
// release's archives hold; the chart is Helm's artifact (config Chart.yaml
// as JSON, one layer: the package as released); the last line is the
// install command.
func TestRun(t *testing.T) {
	tests := []struct {
		name      string
		platforms []release.Platform
	}{
		{name: "two platforms: an index", platforms: []release.Platform{amd64, arm64}},
		{name: "one platform: the image", platforms: []release.Platform{amd64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := serve(t) + "/gpushare"
			dir := t.TempDir()
			digests := fakeRelease(t, dir, "v0.2.0", reg, reg+"/", tt.platforms...)
			var out bytes.Buffer
			p, err := New(Config{Registry: reg, Version: "v0.2.0", Dir: dir, Stdout: &out})
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, r := range image.Recipes() {
				ref, err := name.NewTag(ImageRef(reg, r.Name, "v0.2.0"))
				if err != nil {
					t.Fatal(err)
				}
				desc, err := remote.Get(ref)
				if err != nil {
					t.Fatalf("%s: %v", ref, err)
				}
				got := map[string]v1.Hash{}
				want := map[string]v1.Hash{}
				for _, pl := range tt.platforms {
					want[pl.String()] = digests[pl][r.Name]
				}
				if len(tt.platforms) == 1 {
					if desc.MediaType != types.OCIManifestSchema1 {
						t.Errorf("%s is a %s, want an OCI image manifest", ref, desc.MediaType)
					}
					got[tt.platforms[0].String()] = desc.Digest
				} else {
					if desc.MediaType != types.OCIImageIndex {
						t.Fatalf("%s is a %s, want an OCI image index", ref, desc.MediaType)
					}
					idx, err := desc.ImageIndex()
					if err != nil {
						t.Fatal(err)
					}
					im, err := idx.IndexManifest()
					if err != nil {
						t.Fatal(err)
					}
					for _, m := range im.Manifests {
						got[m.Platform.OS+"/"+m.Platform.Architecture] = m.Digest
					}
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s: platform -> digest (-want +got):\n%s", ref, diff)
				}
			}
			checkChart(t, reg, filepath.Join(dir, "gpushare-0.2.0.tgz"))
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			want := "install it with: helm install gpushare oci://" + reg + "/charts/gpushare --version 0.2.0 -n kube-system"
			if diff := cmp.Diff(want, lines[len(lines)-1]); diff != "" {
				t.Errorf("last line (-want +got):\n%s", diff)
			}
			if len(lines) != len(image.Recipes())+2 {
				t.Errorf("%d lines, want one per image, the chart's and the install command:\n%s", len(lines), out.String())
			}
		})
	}
}

// checkChart checks the chart artifact at REGISTRY/charts/gpushare:0.2.0
// against the package at pkg.
func checkChart(t *testing.T, reg, pkg string) {
	t.Helper()
	ref, err := name.NewTag(reg + "/charts/gpushare:0.2.0")
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(ref)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(pkg)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	type desc struct {
		MediaType types.MediaType
		Digest    string
		Size      int64
	}
	got := []desc{{m.Config.MediaType, "", 0}}
	for _, l := range m.Layers {
		got = append(got, desc{l.MediaType, l.Digest.String(), l.Size})
	}
	want := []desc{{ChartConfigMediaType, "", 0}, {ChartLayerMediaType, "sha256:" + hex.EncodeToString(sum[:]), int64(len(data))}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chart artifact (-want +got):\n%s", diff)
	}
	config, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(`{"apiVersion":"v2","appVersion":"v0.2.0","description":"GPU sharing","name":"gpushare","version":"0.2.0"}`, string(config)); diff != "" {
		t.Errorf("chart config (-want +got):\n%s", diff)
	}
	if got := m.Annotations["org.opencontainers.image.version"]; got != "0.2.0" {
		t.Errorf("version annotation %q, want 0.2.0", got)
	}
}

// TestNew: New refuses, before pushing anything, a release it cannot
// publish as asked, and says what to do.
func TestNew(t *testing.T) {
	const reg = "registry.example.com/team"
	tests := []struct {
		name string
		// setup writes the release into dir.
		setup    func(t *testing.T, dir string)
		registry string
		version  string
		want     string
	}{
		{name: "a scheme", registry: "https://ghcr.io/gpushare", version: "v0.2.0", want: "without a scheme"},
		{name: "a trailing slash", registry: "ghcr.io/gpushare/", version: "v0.2.0", want: "trailing slash"},
		{name: "not a release version", registry: reg, version: "dev", want: "not a release version"},
		{name: "no release", registry: reg, version: "v0.2.0", want: "make release VERSION=v0.2.0 first"},
		{
			name: "images for different platforms", registry: reg, version: "v0.2.0", want: "one set of PLATFORMS",
			setup: func(t *testing.T, dir string) {
				fakeRelease(t, dir, "v0.2.0", reg, reg+"/", amd64, arm64)
				if err := os.Remove(filepath.Join(dir, release.ImageName("gpushare-device-plugin", "v0.2.0", arm64))); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "a chart for another registry", registry: reg, version: "v0.2.0", want: "make release REGISTRY=" + reg + " VERSION=v0.2.0",
			setup: func(t *testing.T, dir string) { fakeRelease(t, dir, "v0.2.0", reg, `""`, amd64) },
		},
		{
			name: "no chart", registry: reg, version: "v0.2.0", want: "make release writes it",
			setup: func(t *testing.T, dir string) {
				fakeRelease(t, dir, "v0.2.0", reg, reg+"/", amd64)
				if err := os.Remove(filepath.Join(dir, "gpushare-0.2.0.tgz")); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "a chart without values", registry: reg, version: "v0.2.0", want: "no gpushare/values.yaml",
			setup: func(t *testing.T, dir string) {
				fakeRelease(t, dir, "v0.2.0", reg, reg+"/", amd64)
				writeChart(t, filepath.Join(dir, "gpushare-0.2.0.tgz"), map[string]string{"gpushare/Chart.yaml": "name: gpushare\nversion: 0.2.0\n"})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.setup != nil {
				tt.setup(t, dir)
			}
			_, err := New(Config{Registry: tt.registry, Version: tt.version, Dir: dir})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New: %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

// TestCheckRegistry: the registries people push to pass, and what would
// make a wrong image name does not.
func TestCheckRegistry(t *testing.T) {
	for _, ok := range []string{"ghcr.io/gpushare", "127.0.0.1:5000/team", "registry.example.com", "localhost:5000/a/b-c"} {
		if err := CheckRegistry(ok); err != nil {
			t.Errorf("CheckRegistry(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "ghcr.io/gpushare/", "https://ghcr.io/x", "ghcr.io/Gpushare", "ghcr.io//x", "ghcr.io/x:v1"} {
		if err := CheckRegistry(bad); err == nil {
			t.Errorf("CheckRegistry(%q): no error", bad)
		}
	}
}
