package chart

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/chart"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite manifests/rendered from the chart")

// load is Load, failing t.
func load(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// render renders combo without an API server, failing t.
func render(t *testing.T, c *chart.Chart, values map[string]any) Rendering {
	t.Helper()
	r, err := Render(c, values, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// objects decodes r, failing t.
func objects(t *testing.T, r Rendering) []map[string]any {
	t.Helper()
	objs, err := r.Objects()
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// find is the rendered object of kind and name, or nil.
func find(objs []map[string]any, kind, name string) map[string]any {
	for _, o := range objs {
		if o["kind"] == kind && field(o, "metadata", "name") == name {
			return o
		}
	}
	return nil
}

// field walks nested maps by keys; nil when a key is missing.
func field(o any, keys ...string) any {
	for _, k := range keys {
		m, ok := o.(map[string]any)
		if !ok {
			return nil
		}
		o = m[k]
	}
	return o
}

// readYAML decodes the objects of a file relative to the repository root.
func readYAML(t *testing.T, rel string) []map[string]any {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	var objs []map[string]any
	for _, d := range splitDocs(string(data)) {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(d), &o); err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		objs = append(objs, o)
	}
	return objs
}

// withoutChartMetadata drops what the chart adds to an object of the plain
// manifests: its labels and annotations.
func withoutChartMetadata(o map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range o {
		out[k] = v
	}
	md := map[string]any{}
	for k, v := range o["metadata"].(map[string]any) {
		if k != "labels" && k != "annotations" {
			md[k] = v
		}
	}
	out["metadata"] = md
	return out
}

func TestEveryCombinationRenders(t *testing.T) {
	c := load(t)
	names := map[string]bool{}
	for _, combo := range Combos() {
		if names[combo.Name] {
			t.Errorf("combination %s twice", combo.Name)
		}
		names[combo.Name] = true
		r := render(t, c, combo.Values)
		objs := objects(t, r)
		if len(objs) == 0 || r.Notes == "" {
			t.Errorf("%s: %d objects, notes %q", combo.Name, len(objs), r.Notes)
		}
		seen := map[string]bool{}
		for _, o := range objs {
			key := fmt.Sprintf("%s %v/%v", o["kind"], field(o, "metadata", "namespace"), field(o, "metadata", "name"))
			if seen[key] {
				t.Errorf("%s: %s rendered twice", combo.Name, key)
			}
			seen[key] = true
		}
	}
	if got := len(names); got != 30 {
		t.Errorf("%d combinations, want 30", got)
	}
}

// TestPlainManifests: manifests/rendered holds the chart's rendering of the
// main combinations, byte for byte (generated certificates replaced).
func TestPlainManifests(t *testing.T) {
	c := load(t)
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, combo := range append(Combos(), VersionedPlain()...) {
		if combo.Plain == "" {
			continue
		}
		r := render(t, c, combo.Values)
		if combo.KubeVersion != "" {
			var err error
			if r, err = RenderAt(c, combo.Values, combo.KubeVersion); err != nil {
				t.Fatal(err)
			}
		}
		got := r.Plain(PlainHeader(combo))
		path := filepath.Join(root, "manifests", "rendered", combo.Plain)
		if *update {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -run TestPlainManifests -update)", err)
		}
		if diff := cmp.Diff(string(want), got); diff != "" {
			t.Errorf("%s differs from the chart's rendering of %s (-file +chart); run go test -run TestPlainManifests -update:\n%s", combo.Plain, combo.Name, diff)
		}
	}
}

// TestDashboardCopy: the chart's dashboard is config/grafana's, and the
// ConfigMap carries it unchanged.
func TestDashboardCopy(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(root, "config", "grafana", "gpushare-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir, _ := ChartDir()
	got, err := os.ReadFile(filepath.Join(dir, "files", "gpushare-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want, got) {
		t.Fatalf("manifests/charts/gpushare/files/gpushare-dashboard.json differs from config/grafana/gpushare-dashboard.json: cp config/grafana/gpushare-dashboard.json manifests/charts/gpushare/files/")
	}
	cm := find(objects(t, render(t, load(t), nil)), "ConfigMap", "gpushare-grafana-dashboard")
	if data, _ := field(cm, "data", "gpushare-dashboard.json").(string); strings.TrimSpace(data) != strings.TrimSpace(string(want)) {
		t.Errorf("the dashboard ConfigMap does not carry the dashboard unchanged")
	}
}

// TestMirrorsOfShippedFiles: what the chart templates from files outside it
// is equal to them, for the default release (namespace kube-system): the
// admission policies (the DRA driver's with the driver), the extender's and the plugin's RBAC rules, the
// webhook (but its clientConfig's caBundle), and the extender stanza of
// the shipped kube-scheduler configurations (but its urlPrefix). The
// extender's RBAC serves both topologies, so each of its objects is the
// chart's in one of them; its Role following kube-system/kube-scheduler is
// the chart's for a scheduler of that Lease name; its ClusterRole, which
// also grants what --dra-node-choice reads, the chart's with the DRA driver.
func TestMirrorsOfShippedFiles(t *testing.T) {
	c := load(t)
	second := objects(t, render(t, c, nil))
	ext := objects(t, render(t, c, map[string]any{"topology": "extender"}))
	followsDefault := objects(t, render(t, c, map[string]any{"scheduler": map[string]any{"name": "kube-scheduler"}}))
	// manifests/extender/rbac.yaml grants what --dra-node-choice reads,
	// which the chart grants with the DRA driver.
	extDRA := objects(t, render(t, c, map[string]any{"topology": "extender", "draDriver": map[string]any{"enabled": true}}))
	for _, file := range []string{"manifests/admission/annotations-policy.yaml", "manifests/admission/extender-status-policy.yaml", "manifests/deviceplugin/admission-policy.yaml", "manifests/admission/dra-driver-node-scope.yaml",
		"manifests/extender/rbac.yaml", "manifests/deviceplugin/rbac.yaml"} {
		for _, want := range readYAML(t, file) {
			kind, name := want["kind"].(string), field(want, "metadata", "name").(string)
			var diffs []string
			for _, rendering := range [][]map[string]any{second, ext, followsDefault, extDRA} {
				if got := find(rendering, kind, name); got != nil {
					diffs = append(diffs, cmp.Diff(want, withoutChartMetadata(got)))
				}
			}
			switch {
			case len(diffs) == 0:
				t.Errorf("the chart renders no %s %s of %s", kind, name, file)
			case !slices.Contains(diffs, ""):
				t.Errorf("%s %s differs from %s (-file +chart):\n%s", kind, name, file, diffs[0])
			}
		}
	}

	want := readYAML(t, "config/mutating-webhook.yaml")[0]
	got := withoutChartMetadata(find(second, "MutatingWebhookConfiguration", "gpushare-scheduler-name"))
	for _, o := range []map[string]any{want, got} {
		delete(field(o, "webhooks").([]any)[0].(map[string]any)["clientConfig"].(map[string]any), "caBundle")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the webhook differs from config/mutating-webhook.yaml (-file +chart):\n%s", diff)
	}

	for _, tc := range []struct {
		name, file string
		objs       []map[string]any
		configMap  string
	}{
		{name: "second-scheduler", file: "config/kube-scheduler-config.yaml", objs: second, configMap: "gpushare-scheduler-config"},
		{name: "extender", file: "config/kube-scheduler-config-https.yaml", objs: ext, configMap: "gpushare-kube-scheduler-config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shipped := readYAML(t, tc.file)[0]
			cfg := schedulerConfig(t, tc.objs, tc.configMap)
			wantExt := field(shipped, "extenders").([]any)
			gotExt := field(cfg, "extenders").([]any)
			for _, list := range [][]any{wantExt, gotExt} {
				for _, e := range list {
					delete(e.(map[string]any), "urlPrefix")
				}
			}
			if diff := cmp.Diff(wantExt, gotExt); diff != "" {
				t.Errorf("the chart's extender stanza differs from %s (-file +chart):\n%s", tc.file, diff)
			}
			for _, key := range []string{"percentageOfNodesToScore"} {
				if shipped[key] != nil && cmp.Diff(shipped[key], cfg[key]) != "" {
					t.Errorf("%s: %v in %s, %v in the chart", key, shipped[key], tc.file, cfg[key])
				}
			}
			if diff := cmp.Diff(field(shipped, "clientConnection", "qps"), field(cfg, "clientConnection", "qps")); diff != "" {
				t.Errorf("clientConnection.qps differs from %s: %s", tc.file, diff)
			}
		})
	}
}

// schedulerConfig decodes the KubeSchedulerConfiguration of a rendered
// ConfigMap.
func schedulerConfig(t *testing.T, objs []map[string]any, name string) map[string]any {
	t.Helper()
	data, _ := field(find(objs, "ConfigMap", name), "data", "kube-scheduler-config.yaml").(string)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(data), &cfg); err != nil || cfg == nil {
		t.Fatalf("ConfigMap %s: no KubeSchedulerConfiguration (%v)", name, err)
	}
	return cfg
}

// TestNotesPrintTheStanza: the extender topology's NOTES.txt prints the
// extenders stanza of the ConfigMap the operator's scheduler loads.
func TestNotesPrintTheStanza(t *testing.T) {
	c := load(t)
	for _, values := range []map[string]any{
		{"topology": "extender"},
		{"topology": "extender", "extender": map[string]any{"service": map[string]any{"clusterIP": "10.96.0.99"}}},
	} {
		r := render(t, c, values)
		want := field(schedulerConfig(t, objects(t, r), "gpushare-kube-scheduler-config"), "extenders")
		start := strings.Index(r.Notes, "extenders:")
		end := strings.Index(r.Notes, "\n\n3.")
		if start < 0 || end < start {
			t.Fatalf("NOTES.txt prints no extenders stanza:\n%s", r.Notes)
		}
		var got map[string]any
		if err := yaml.Unmarshal([]byte(r.Notes[start:end]), &got); err != nil {
			t.Fatalf("the stanza in NOTES.txt is not YAML: %v\n%s", err, r.Notes[start:end])
		}
		if diff := cmp.Diff(want, got["extenders"]); diff != "" {
			t.Errorf("NOTES.txt's stanza differs from the ConfigMap's (-configmap +notes):\n%s", diff)
		}
		for _, flag := range []string{"--config=", "gpushare-scheduler-client-tls"} {
			if !strings.Contains(r.Notes, flag) {
				t.Errorf("NOTES.txt does not mention %s", flag)
			}
		}
	}
}

// TestLeastPrivilege: no rendered Role or ClusterRole has a wildcard or
// touches Secrets, in any combination.
func TestLeastPrivilege(t *testing.T) {
	c := load(t)
	for _, combo := range Combos() {
		for _, o := range objects(t, render(t, c, combo.Values)) {
			if o["kind"] != "Role" && o["kind"] != "ClusterRole" {
				continue
			}
			for _, rule := range field(o, "rules").([]any) {
				for _, key := range []string{"apiGroups", "resources", "verbs", "resourceNames"} {
					vals, _ := field(rule, key).([]any)
					for _, v := range vals {
						if s := v.(string); s == "*" || strings.HasPrefix(s, "secrets") {
							t.Errorf("%s: %s %s grants %s %q", combo.Name, o["kind"], field(o, "metadata", "name"), key, s)
						}
					}
				}
			}
		}
	}
}

// TestSchemaRefusesUnknownValues: values.schema.json catches a misspelt
// topology or policy before anything is rendered.
func TestSchemaRefusesUnknownValues(t *testing.T) {
	c := load(t)
	for _, values := range []map[string]any{
		{"topology": "extenders"},
		{"extender": map[string]any{"policy": "packing"}},
		{"devicePlugin": map[string]any{"memoryUnit": "GB"}},
		{"draDriver": map[string]any{"deviceOrder": "random"}},
		{"draDriver": map[string]any{"enable": true}},
	} {
		if _, err := Render(c, values, nil); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("values %v: err = %v, want a schema error", values, err)
		}
	}
}
