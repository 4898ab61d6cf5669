package extender

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/pkg/certs"
	"github.com/gpushare/gpushare/pkg/certs/certstest"
	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/preemption"
	"github.com/gpushare/gpushare/pkg/webhook"
)

// dashboardFile is the Grafana dashboard the Helm chart ships.
var dashboardFile = filepath.Join("..", "..", "config", "grafana", "gpushare-dashboard.json")

// TestDashboardQueriesExistingMetrics: every metric name in the dashboard's
// PromQL (panels and variables) is one the extender or the device plugin
// exports, as they register them (a histogram's _bucket, _sum and _count
// count as its name).
func TestDashboardQueriesExistingMetrics(t *testing.T) {
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("%s is not JSON: %v", dashboardFile, err)
	}
	var exprs []string
	collectQueries(dash, &exprs)
	if len(exprs) < 10 {
		t.Fatalf("found %d queries in the dashboard; the walk is broken", len(exprs))
	}
	used := map[string][]string{} // metric -> queries using it
	for _, e := range exprs {
		for _, n := range queryMetrics(e) {
			used[n] = append(used[n], e)
		}
	}

	exported := exportedFamilies(t)
	for name, queries := range used {
		f := exported[name]
		if f == nil {
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if base, ok := strings.CutSuffix(name, suffix); ok {
					if h := exported[base]; h != nil && (h.GetType() == dto.MetricType_HISTOGRAM || h.GetType() == dto.MetricType_SUMMARY) {
						f = h
					}
				}
			}
		}
		if f == nil {
			t.Errorf("the dashboard queries %s, which neither the extender nor the device plugin exports (in %q)", name, queries[0])
		}
	}
	var names []string
	for n := range used {
		names = append(names, n)
	}
	sort.Strings(names)
	t.Logf("the dashboard queries %d metrics: %v", len(names), names)
}

// exportedFamilies returns every metric family the extender and the device
// plugin export, each built as its Run builds it and scraped once.
func exportedFamilies(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	f := newFixture(t) // cards, so the card gauges are there
	reg := f.h.Registerer()
	pending, err := newPendingPods(informers.NewSharedInformerFactory(fake.NewClientset(), 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := pending.register(reg); err != nil {
		t.Fatal(err)
	}
	budgets := informers.NewSharedInformerFactory(f.client, 0).Policy().V1().PodDisruptionBudgets()
	preemptor, err := preemption.New(ktestingLogger(t), preemption.Config{Cache: f.cache, API: preemption.ClientAPI{Client: f.client}, Pods: f.feeder, Nodes: f.feeder, Budgets: budgets})
	if err != nil {
		t.Fatal(err)
	}
	if err := preemptor.Register(reg); err != nil {
		t.Fatal(err)
	}
	ca := certstest.NewCA(t, "ca")
	dir := t.TempDir()
	certstest.WriteSecretVolume(t, dir, certstest.SecretFiles(ca, ca.Server(t)))
	kp, err := certs.LoadKeyPair(filepath.Join(dir, certstest.CertFile), filepath.Join(dir, certstest.KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := certs.LoadCAPool(filepath.Join(dir, certstest.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := (&tlsFiles{api: kp, clientCAs: pool, webhook: kp}).register(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := webhook.New(ktestingLogger(t), webhook.DefaultSchedulerName, reg); err != nil {
		t.Fatal(err)
	}
	fams := scrapeHandler(t, f.handler)

	m := deviceplugin.NewMetrics([]deviceplugin.Card{{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "T4"}, Units: 16}})
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var p expfmt.TextParser
	plugin, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	for name, fam := range plugin {
		if _, dup := fams[name]; !dup || !strings.HasPrefix(name, "gpushare_") {
			fams[name] = fam // go_ and process_ are in both
		}
	}
	return fams
}

// collectQueries appends every PromQL query under v: each "expr", and
// each variable's query ("definition", or "query" as a string or inside an
// object).
func collectQueries(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && (k == "expr" || k == "definition") && s != "" {
				*out = append(*out, s)
			}
			if s, ok := val.(string); ok && k == "query" && strings.HasPrefix(s, "label_values(") {
				*out = append(*out, s)
			}
			collectQueries(val, out)
		}
	case []any:
		for _, e := range x {
			collectQueries(e, out)
		}
	}
}

// promqlWords are words of PromQL that are no metric names (keywords and
// aggregation operators, which may come before their "by (...)"); those in
// labelLists are followed by a list of label names.
var (
	promqlWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
		"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true,
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true, "count": true,
		"count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true, "limit_ratio": true}
	labelLists = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

// queryMetrics returns the metric names a PromQL expression, or a Grafana
// label_values(metric, label) variable query, selects: identifiers outside
// strings, label matchers ({...}), ranges ([...]) and label lists (by (...)
// and the like) that are neither keywords nor called as functions.
func queryMetrics(expr string) []string {
	if inner, ok := strings.CutPrefix(strings.TrimSpace(expr), "label_values("); ok {
		inner = strings.TrimSuffix(strings.TrimSpace(inner), ")")
		if i := strings.LastIndex(inner, ","); i >= 0 {
			return queryMetrics(inner[:i])
		}
		return nil // label_values(label): no metric
	}
	var out []string
	skipTo := func(i int, end byte) int {
		for i++; i < len(expr) && expr[i] != end; i++ {
			if expr[i] == '\\' && end != '}' && end != ']' && end != ')' {
				i++
			}
		}
		return i + 1
	}
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || !first && c >= '0' && c <= '9'
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			i = skipTo(i, c)
		case c == '{':
			// Label values are strings, skipped with the braces.
			for i++; i < len(expr) && expr[i] != '}'; i++ {
				if q := expr[i]; q == '"' || q == '\'' || q == '`' {
					i = skipTo(i, q) - 1
				}
			}
			i++
		case c == '[':
			i = skipTo(i, ']')
		case c >= '0' && c <= '9' || c == '.':
			for i++; i < len(expr) && (isIdent(expr[i], false) || expr[i] == '.'); i++ {
			}
		case isIdent(c, true):
			j := i + 1
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && expr[k] == ' ' {
				k++
			}
			next := byte(0)
			if k < len(expr) {
				next = expr[k]
			}
			switch lw := strings.ToLower(word); {
			case labelLists[lw] && next == '(':
				j = skipTo(k, ')')
			case promqlWords[lw], next == '(':
			default:
				if !slices.Contains(out, word) {
					out = append(out, word)
				}
			}
			i = j
		default:
			i++
		}
	}
	return out
}

func TestQueryMetrics(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum by (result) (rate(gpushare_extender_binds_total[$__rate_interval]))`, []string{"gpushare_extender_binds_total"}},
		{`histogram_quantile(0.99, sum by (verb, le) (rate(x_bucket[5m])))`, []string{"x_bucket"}},
		{`a{node=~"$node", l="by {x}"} / on (node) group_left(model) b`, []string{"a", "b"}},
		{`count(c == 0) or vector(0)`, []string{"c"}},
		{`min by (listener) (m) - time()`, []string{"m"}},
		{`x offset 5m > bool 1e3 unless y`, []string{"x", "y"}},
		{`sum(a - b > 0 and b > 0)`, []string{"a", "b"}},
		{`label_values(gpushare_card_memory_bytes, node)`, []string{"gpushare_card_memory_bytes"}},
		{`label_values(node)`, nil},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, queryMetrics(tc.expr)); diff != "" {
			t.Errorf("queryMetrics(%q) (-want +got):\n%s", tc.expr, diff)
		}
	}
}
