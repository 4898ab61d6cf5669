package chart

import (
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// TestPackage: the release's chart package carries the version, its
// default image tags are the release's, and it holds the README and the
// values schema.
func TestPackage(t *testing.T) {
	out := t.TempDir()
	p, err := Package("v0.3.1", out)
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
	if _, err := Package("dev", out); err == nil || !strings.Contains(err.Error(), "git tag") {
		t.Errorf("Package(dev): err = %v, want the release-version error", err)
	}
}
