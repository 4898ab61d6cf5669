package chart

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	helmregistry "helm.sh/helm/v3/pkg/registry"

	"github.com/gpushare/gpushare/pkg/build/publish"
)

// TestPublishedChartHelmLocates pushes the real chart, packaged for a
// loopback registry (go-containerregistry's), as make publish pushes it,
// and has Helm find it the way `helm install gpushare
// oci://REGISTRY/charts/gpushare --version X.Y.Z` does (its registry client
// and LocateChart). What Helm downloads is the package byte for byte, and
// its images default to that registry.
func TestPublishedChartHelmLocates(t *testing.T) {
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(s.Close)
	reg := strings.TrimPrefix(s.URL, "http://") + "/gpushare"
	pkg, err := Package("v0.4.0", reg, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := publish.PushChart(reg, pkg); err != nil {
		t.Fatal(err)
	}

	home := t.TempDir()
	t.Setenv("HELM_CACHE_HOME", filepath.Join(home, "cache"))
	t.Setenv("HELM_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv("HELM_DATA_HOME", filepath.Join(home, "data"))
	settings := cli.New()
	rc, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptWriter(io.Discard),
		helmregistry.ClientOptCredentialsFile(filepath.Join(home, "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{})
	install.SetRegistryClient(rc)
	install.Version = "0.4.0"
	install.PlainHTTP = true
	located, err := install.LocateChart(publish.ChartURL(reg), settings)
	if err != nil {
		t.Fatalf("helm locating %s --version 0.4.0: %v", publish.ChartURL(reg), err)
	}
	want, err := os.ReadFile(pkg) //nolint:gosec // the test's package
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(located) //nolint:gosec // Helm's download
	if err != nil {
		t.Fatal(err)
	}
	if !cmp.Equal(want, got) {
		t.Errorf("Helm downloaded %d bytes at %s, not the %d bytes of the published package", len(got), located, len(want))
	}
	c, err := loader.Load(located)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"0.4.0", "v0.4.0"}, []string{c.Metadata.Version, c.Metadata.AppVersion}); diff != "" {
		t.Errorf("the located chart's version and appVersion (-want +got):\n%s", diff)
	}
	r, err := RenderAt(c, nil, "v1.33.2")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gpushare-scheduler-extender", "gpushare-device-plugin"} {
		if want := "image: " + reg + "/" + name + ":v0.4.0"; !strings.Contains(strings.Join(r.Docs, ""), want) {
			t.Errorf("the chart Helm located renders no %q", want)
		}
	}

	// A version that was not published is not found.
	install.Version = "0.4.1"
	if _, err := install.LocateChart(publish.ChartURL(reg), settings); err == nil {
		t.Error("Helm located version 0.4.1, which was never pushed")
	}
}
