package chart

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// TestPackage: the release's chart package carries the version, its
// default image tags are the release's, and it holds the README and the
// values schema.
func TestPackage(t *testing.T) {
	out := t.TempDir()
	p, err := Package("v0.3.1", "", out)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(out, "gpushare-0.3.1.tgz"); p != want {
		t.Errorf("package %s, want %s", p, want)
	}
	c, err := loader.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Metadata.Version != "0.3.1" || c.Metadata.AppVersion != "v0.3.1" {
		t.Errorf("version %s, appVersion %s; want 0.3.1 and v0.3.1", c.Metadata.Version, c.Metadata.AppVersion)
	}
	if c.Schema == nil {
		t.Error("the package has no values.schema.json")
	}
	readme := false
	for _, f := range c.Files {
		readme = readme || f.Name == "README.md"
	}
	if !readme {
		t.Error("the package has no README.md")
	}
	r, err := RenderAt(c, nil, "v1.33.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"image: gpushare-scheduler-extender:v0.3.1", "image: gpushare-device-plugin:v0.3.1", "image: registry.k8s.io/kube-scheduler:v1.33.2"} {
		if !strings.Contains(strings.Join(r.Docs, ""), want) {
			t.Errorf("the packaged chart renders no %q", want)
		}
	}
	if _, err := Package("dev", "", out); err == nil || !strings.Contains(err.Error(), "git tag") {
		t.Errorf("Package(dev): err = %v, want the release-version error", err)
	}
}

// TestPackageForARegistry: a package made for a registry (make release
// REGISTRY=...) pulls its images from there by default, its values.yaml
// keeping every comment, and a registry the schema refuses is not
// packaged.
func TestPackageForARegistry(t *testing.T) {
	p, err := Package("v0.3.1", "127.0.0.1:5000/team", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c, err := loader.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	r, err := RenderAt(c, nil, "v1.33.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"image: 127.0.0.1:5000/team/gpushare-scheduler-extender:v0.3.1", "image: 127.0.0.1:5000/team/gpushare-device-plugin:v0.3.1"} {
		if !strings.Contains(strings.Join(r.Docs, ""), want) {
			t.Errorf("the packaged chart renders no %q", want)
		}
	}
	orig, err := os.ReadFile(filepath.Join(chartDirOf(t), "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var packaged []byte
	for _, f := range c.Raw {
		if f.Name == "values.yaml" {
			packaged = f.Data
		}
	}
	want := strings.Replace(string(orig), "\n  registry: \"\"\n", "\n  registry: \"127.0.0.1:5000/team/\"\n", 1)
	if diff := cmp.Diff(want, string(packaged)); diff != "" {
		t.Errorf("the packaged values.yaml (-want +got):\n%s", diff)
	}
	if _, err := Package("v0.3.1", "https://ghcr.io/you", t.TempDir()); err == nil || !strings.Contains(err.Error(), "/image/registry") {
		t.Errorf("Package for a URL: %v, want the schema's refusal of image.registry", err)
	}
}

// chartDirOf is the chart's directory.
func chartDirOf(t *testing.T) string {
	t.Helper()
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestImageRegistry: image.registry names the images with or without its
// trailing slash, and the schema refuses what would make a wrong name.
func TestImageRegistry(t *testing.T) {
	c := load(t)
	tests := []struct {
		registry string
		want     string // the device plugin's image; empty: refused
	}{
		{registry: "", want: "gpushare-device-plugin:dev"},
		{registry: "ghcr.io/you", want: "ghcr.io/you/gpushare-device-plugin:dev"},
		{registry: "ghcr.io/you/", want: "ghcr.io/you/gpushare-device-plugin:dev"},
		{registry: "127.0.0.1:5000/a/b", want: "127.0.0.1:5000/a/b/gpushare-device-plugin:dev"},
		{registry: "registry.example.com", want: "registry.example.com/gpushare-device-plugin:dev"},
		{registry: "https://ghcr.io/you"},
		{registry: "ghcr.io/you:v1"},
		{registry: "ghcr.io//you"},
		{registry: "ghcr.io/You"},
	}
	for _, tt := range tests {
		t.Run(tt.registry, func(t *testing.T) {
			r, err := Render(c, map[string]any{"image": map[string]any{"registry": tt.registry}}, nil)
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), "/image/registry") {
					t.Errorf("image.registry %q: %v, want the schema's refusal", tt.registry, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ds := find(objects(t, r), "DaemonSet", "gpushare-device-plugin")
			containers, _ := field(ds, "spec", "template", "spec", "containers").([]any)
			if len(containers) == 0 {
				t.Fatal("the device plugin's DaemonSet has no container")
			}
			if got := field(containers[0], "image"); got != tt.want {
				t.Errorf("image.registry %q: image %v, want %s", tt.registry, got, tt.want)
			}
		})
	}
}
