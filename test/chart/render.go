package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// Release is the release every rendering uses: the namespace the plain
// manifests and the admission policies name.
var Release = chartutil.ReleaseOptions{Name: "gpushare", Namespace: "kube-system", IsInstall: true, Revision: 1}

// KubeVersion is the Kubernetes version the chart is rendered for, that of
// the test harness's control plane.
const KubeVersion = "v1.34.3"

// Rendering is a rendered chart: its manifests, as `helm template` orders
// them (by template file), and NOTES.txt.
type Rendering struct {
	// Docs are the YAML documents, each one object, empty ones dropped.
	Docs []string
	// Notes is the rendered NOTES.txt.
	Notes string
}

// ChartDir is manifests/charts/gpushare, found from the working directory
// (this package's directory when tests run).
func ChartDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "manifests", "charts", "gpushare"), nil
}

// RepoRoot is the repository root: the nearest parent of the working
// directory holding manifests/charts/gpushare.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "manifests", "charts", "gpushare", "Chart.yaml")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("finding the repository root: no manifests/charts/gpushare above the working directory")
		}
		dir = parent
	}
}

// Load reads the chart from its directory.
func Load() (*chart.Chart, error) {
	dir, err := ChartDir()
	if err != nil {
		return nil, err
	}
	c, err := loader.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("loading the chart %s: %w", dir, err)
	}
	return c, nil
}

// Render renders c with values over its defaults (validated against
// values.schema.json), as `helm template` would for Release. With cfg the
// templates' lookup calls read that API server; without, they find
// nothing, as in `helm template`.
func Render(c *chart.Chart, values map[string]any, cfg *rest.Config) (Rendering, error) {
	return renderCaps(c, values, cfg, chartutil.KubeVersion{Version: KubeVersion, Major: "1", Minor: "34"})
}

// RenderAt renders c without an API server as `helm template
// --kube-version` would for a cluster of kubeVersion (e.g. "v1.31.4", or a
// managed cluster's "v1.31.4-eks-1552ad0").
func RenderAt(c *chart.Chart, values map[string]any, kubeVersion string) (Rendering, error) {
	v, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return Rendering{}, fmt.Errorf("rendering the chart: %w", err)
	}
	v.Version = kubeVersion // as the API server reports it, suffix included
	return renderCaps(c, values, nil, *v)
}

// RenderIn renders c as `helm install` would in a cluster holding objects
// (a fake dynamic client answers the templates' lookup calls), for
// KubeVersion.
func RenderIn(c *chart.Chart, values map[string]any, objects ...runtime.Object) (Rendering, error) {
	scheme := runtime.NewScheme()
	cluster := fakeCluster{client: dynamicfake.NewSimpleDynamicClient(scheme, objects...)}
	return renderWith(c, values, chartutil.KubeVersion{Version: KubeVersion, Major: "1", Minor: "34"}, func(vals chartutil.Values) (map[string]string, error) {
		return engine.RenderWithClientProvider(c, vals, cluster)
	})
}

// fakeCluster gives the templates' lookup calls a fake dynamic client.
type fakeCluster struct {
	client dynamic.Interface
}

var _ engine.ClientProvider = fakeCluster{}

// clusterScoped are the kinds the chart looks up that are not namespaced.
var clusterScoped = map[string]bool{"Namespace": true, "Node": true, "RuntimeClass": true}

// GetClientFor returns the fake client of apiVersion's kind, the resource
// guessed from the kind (RuntimeClass: runtimeclasses).
func (f fakeCluster) GetClientFor(apiVersion, kind string) (dynamic.NamespaceableResourceInterface, bool, error) {
	gv, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, false, err
	}
	plural, _ := meta.UnsafeGuessKindToResource(gv.WithKind(kind))
	return f.client.Resource(plural), !clusterScoped[kind], nil
}

func renderCaps(c *chart.Chart, values map[string]any, cfg *rest.Config, kv chartutil.KubeVersion) (Rendering, error) {
	return renderWith(c, values, kv, func(vals chartutil.Values) (map[string]string, error) {
		if cfg != nil {
			return engine.RenderWithClient(c, vals, cfg)
		}
		return engine.Engine{Strict: true}.Render(c, vals)
	})
}

// renderWith renders c for kv with run, which answers (or not) the
// templates' lookup calls.
func renderWith(c *chart.Chart, values map[string]any, kv chartutil.KubeVersion, run func(chartutil.Values) (map[string]string, error)) (Rendering, error) {
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = kv
	if c.Metadata.KubeVersion != "" && !chartutil.IsCompatibleRange(c.Metadata.KubeVersion, kv.Version) {
		return Rendering{}, fmt.Errorf("rendering the chart: it asks Kubernetes %s, not %s", c.Metadata.KubeVersion, kv.Version)
	}
	vals, err := chartutil.ToRenderValues(c, values, Release, caps)
	if err != nil {
		return Rendering{}, fmt.Errorf("rendering the chart: %w", err)
	}
	files, err := run(vals)
	if err != nil {
		return Rendering{}, fmt.Errorf("rendering the chart: %w", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	var r Rendering
	for _, name := range names {
		base := filepath.Base(name)
		switch {
		case base == "NOTES.txt":
			r.Notes = files[name]
			continue
		case strings.HasPrefix(base, "_"):
			continue
		}
		for _, doc := range splitDocs(files[name]) {
			r.Docs = append(r.Docs, "# Source: "+strings.TrimPrefix(name, c.Name()+"/")+"\n"+doc)
		}
	}
	return r, nil
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// splitDocs splits a multi-document YAML file, dropping documents that hold
// only comments or whitespace.
func splitDocs(s string) []string {
	var docs []string
	for _, d := range docSeparator.Split(s, -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(d), &obj); err == nil && len(obj) == 0 {
			continue // comments only; a document that does not decode is kept for Objects to report
		}
		docs = append(docs, strings.TrimSpace(d)+"\n")
	}
	return docs
}

// Objects decodes the documents into generic objects.
func (r Rendering) Objects() ([]map[string]any, error) {
	objs := make([]map[string]any, 0, len(r.Docs))
	for _, d := range r.Docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(d), &obj); err != nil {
			return nil, fmt.Errorf("decoding a rendered object: %w\n%s", err, d)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

// generated matches the base64 certificate and key data Helm generates at
// each rendering: a Secret's tls.crt, tls.key and ca.crt, a webhook's
// caBundle.
var generated = regexp.MustCompile(`(?m)^(\s*(?:tls\.crt|tls\.key|ca\.crt|caBundle):) [A-Za-z0-9+/=]{64,}$`)

// Placeholder stands for generated certificate data in the plain
// manifests: valid base64 (of the text below), so they apply, but no
// certificate.
var Placeholder = "UkVQTEFDRSBNRTogZ2VuZXJhdGVkIGJ5IEhlbG0gYXQgaW5zdGFsbCAoc2VlIGRvY3MvaW5zdGFsbC5tZCk="

// Plain is the rendering as committed under manifests/rendered: the
// documents joined, generated certificate data replaced by Placeholder.
func (r Rendering) Plain(header string) string {
	var b strings.Builder
	b.WriteString(header)
	for _, d := range r.Docs {
		b.WriteString("---\n")
		b.WriteString(generated.ReplaceAllString(d, "$1 "+Placeholder))
	}
	return b.String()
}

// yamlToJSON converts one YAML document to JSON.
func yamlToJSON(doc string) ([]byte, error) {
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		return nil, fmt.Errorf("converting a rendered object to JSON: %w", err)
	}
	return j, nil
}
