package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/strvals"

	"github.com/gpushare/gpushare/test/docs"
)

// helmCommand is one helm install, upgrade or template line of the docs.
type helmCommand struct {
	chart     string   // manifests/charts/gpushare, gpushare-X.Y.Z.tgz or oci://REGISTRY/charts/gpushare
	version   string   // --version, or empty
	namespace string   // -n
	sets      []string // each --set and --set-string argument, in order
	kube      string   // --kube-version, or empty
}

// releasePackage matches the release's chart package, e.g. gpushare-0.1.0.tgz.
var releasePackage = regexp.MustCompile(`^gpushare-([0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?)\.tgz$`)

// parseHelm reads a helm command of the docs: helm install|upgrade NAME
// CHART or helm template NAME CHART, with the flags the docs use.
func parseHelm(cmd string) (helmCommand, error) {
	args := docs.Fields(cmd)
	if len(args) < 4 || args[0] != "helm" || (args[1] != "install" && args[1] != "upgrade" && args[1] != "template") {
		return helmCommand{}, fmt.Errorf("%q: a chart block holds helm install, upgrade or template commands only", cmd)
	}
	var h helmCommand
	var positional []string
	for i := 2; i < len(args); i++ {
		a := args[i]
		value := func() (string, error) {
			if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "--") {
				return v, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%q: %s needs a value", cmd, a)
			}
			i++
			return args[i], nil
		}
		name, _, _ := strings.Cut(a, "=")
		var err error
		switch name {
		case "-n", "--namespace":
			h.namespace, err = value()
		case "--set", "--set-string":
			var v string
			v, err = value()
			h.sets = append(h.sets, v)
		case "--kube-version":
			h.kube, err = value()
		case "--version":
			h.version, err = value()
		case "--reuse-values", "--create-namespace", "--wait", "--atomic":
		default:
			if strings.HasPrefix(a, "-") {
				return helmCommand{}, fmt.Errorf("%q: flag %s is not one this test knows; teach parseHelm what it means", cmd, a)
			}
			positional = append(positional, a)
		}
		if err != nil {
			return helmCommand{}, err
		}
	}
	if len(positional) != 2 {
		return helmCommand{}, fmt.Errorf("%q: want a release name and a chart, got %q", cmd, positional)
	}
	h.chart = positional[1]
	return h, nil
}

// TestDocsHelmCommands renders every helm command of the docs' chart
// blocks as helm would: the chart (the directory, or the release package
// made as make release makes it), the namespace, and the --set values
// parsed with Helm's own parser. Each --set must name a value values.yaml
// documents (helm silently ignores a misspelt one), and each value given
// must show in the rendering.
func TestDocsHelmCommands(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := docs.Load(root)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	documented, err := valuesOf(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	charts := map[string]*chart.Chart{} // chart argument -> loaded chart
	n := 0
	for _, b := range blocks {
		if b.Mode != docs.ModeChart {
			continue
		}
		for _, cmd := range docs.Commands(b.Text) {
			n++
			h, err := parseHelm(cmd)
			if err != nil {
				t.Errorf("%s: %v", b, err)
				continue
			}
			c, ok := charts[h.chart+" "+h.version]
			if !ok {
				c, err = loadDocsChart(t, h.chart, h.version)
				if err != nil {
					t.Errorf("%s: %v", b, err)
					continue
				}
				charts[h.chart+" "+h.version] = c
			}
			if h.namespace != Release.Namespace {
				t.Errorf("%s: %q installs into namespace %q; the docs install into %s (the admission policies name its service accounts)", b, cmd, h.namespace, Release.Namespace)
			}
			values := map[string]any{}
			for _, s := range h.sets {
				if err := strvals.ParseInto(s, values); err != nil {
					t.Errorf("%s: --set %s: %v", b, s, err)
				}
				key, _, _ := strings.Cut(s, "=")
				if !documentedKey(documented, key) {
					t.Errorf("%s: --set %s names no value of values.yaml: helm would ignore it", b, key)
				}
			}
			kube := h.kube
			if kube == "" {
				kube = KubeVersion
			}
			r, err := RenderAt(c, values, kube)
			if err != nil {
				t.Errorf("%s: %q does not render: %v", b, cmd, err)
				continue
			}
			rendered := strings.Join(r.Docs, "")
			for _, s := range h.sets {
				key, v, _ := strings.Cut(s, "=")
				if v != "" && v != "true" && v != "false" && !strings.Contains(rendered, v) {
					t.Errorf("%s: --set %s=%s does not show in the rendering", b, key, v)
				}
			}
		}
	}
	if n < 5 {
		t.Errorf("found %d helm commands in the docs; the chart markers or the parser are broken", n)
	}
	t.Logf("rendered %d helm commands of the docs", n)
}

// publishedChart matches a published chart, oci://REGISTRY/charts/gpushare.
var publishedChart = regexp.MustCompile(`^oci://(.+)/charts/gpushare$`)

// loadDocsChart loads the chart a docs command names: the chart's
// directory, a release package, or a published chart with its --version,
// each made here as make release (REGISTRY=) makes it.
func loadDocsChart(t *testing.T, arg, version string) (*chart.Chart, error) {
	if version != "" && !publishedChart.MatchString(arg) {
		return nil, fmt.Errorf("--version %s is for a published chart oci://REGISTRY/charts/gpushare, not for %s", version, arg)
	}
	if arg == "manifests/charts/gpushare" {
		return Load()
	}
	if m := publishedChart.FindStringSubmatch(arg); m != nil {
		if version == "" {
			return nil, fmt.Errorf("%s without --version: say which release to install", arg)
		}
		p, err := Package("v"+version, m[1], t.TempDir())
		if err != nil {
			return nil, err
		}
		return loader.Load(p)
	}
	m := releasePackage.FindStringSubmatch(arg)
	if m == nil {
		return nil, fmt.Errorf("chart %q is neither manifests/charts/gpushare, a release package gpushare-X.Y.Z.tgz nor oci://REGISTRY/charts/gpushare", arg)
	}
	p, err := Package("v"+m[1], "", t.TempDir())
	if err != nil {
		return nil, err
	}
	if filepath.Base(p) != arg {
		return nil, fmt.Errorf("make release names the package %s, the docs %s", filepath.Base(p), arg)
	}
	return loader.Load(p)
}

// docValue matches a dotted chart value in a doc's inline code, with an
// optional =VALUE or : VALUE after it, e.g. `devicePlugin.runtimeCDI=true`.
var docValue = regexp.MustCompile("`([a-z][A-Za-z0-9]*(?:\\.[a-z][A-Za-z0-9]*)+)(?:[=:][^`]*)?`")

// fileName matches a file name that looks like a dotted value, e.g.
// extender.yaml or tls.crt.
var fileName = regexp.MustCompile(`\.(crt|key|log|yaml|json|md|txt|tgz|tar|sock|go)$`)

// parentKey says whether key is an object above documented values, e.g.
// image.draDriver above image.draDriver.repository.
func parentKey(values []Value, key string) bool {
	for _, v := range values {
		if strings.HasPrefix(v.Key, key+".") {
			return true
		}
	}
	return false
}

// TestDocsNameExistingValues: every chart value the docs name in inline
// code, as the first part of a dotted path under one of values.yaml's
// top-level keys, is a value values.yaml documents (or inside one). So a
// doc cannot keep telling users to set a value the chart dropped or
// renamed, which Helm would silently ignore.
func TestDocsNameExistingValues(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	documented, err := valuesOf(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	top := map[string]bool{}
	for _, v := range documented {
		first, _, _ := strings.Cut(v.Key, ".")
		top[first] = true
	}
	files, err := docs.Files(root)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f)) //nolint:gosec // the repository's docs
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range docValue.FindAllStringSubmatch(line, -1) {
				key := m[1]
				first, _, _ := strings.Cut(key, ".")
				if !top[first] || fileName.MatchString(key) {
					continue
				}
				n++
				if !documentedKey(documented, key) && !parentKey(documented, key) {
					t.Errorf("%s:%d names the chart value %s, which values.yaml does not have", f, i+1, key)
				}
			}
		}
	}
	if n < 20 {
		t.Errorf("found %d chart values named in the docs; the pattern is broken", n)
	}
	t.Logf("checked %d chart values the docs name", n)
}
