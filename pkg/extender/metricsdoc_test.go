package extender

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// metricsDoc is the metrics reference.
var metricsDoc = filepath.Join("..", "..", "docs", "reference", "metrics.md")

// docMetric matches a metric name in the first cell of a row of the
// reference's table.
var docMetric = regexp.MustCompile("(?m)^\\| `(gpushare_[a-z0-9_]+)`(?:, `(gpushare_[a-z0-9_]+)`)? \\|")

// TestMetricsDocumented: the metrics reference lists every gpushare_
// metric the extender and the device plugin export, and nothing else.
func TestMetricsDocumented(t *testing.T) {
	data, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range docMetric.FindAllStringSubmatch(string(data), -1) {
		for _, name := range m[1:] {
			if name != "" {
				documented[name] = true
			}
		}
	}
	exported := map[string]bool{}
	for name := range exportedFamilies(t) {
		exported[name] = true
	}
	// A counter vector shows only once a child exists: make the MPS
	// restart counter's.
	m := deviceplugin.NewMetrics([]deviceplugin.Card{{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "T4"}, Units: 16}})
	m.MPSRestarted("GPU-0")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	var p expfmt.TextParser
	plugin, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	for name := range plugin {
		exported[name] = true
	}
	for name := range exported {
		if strings.HasPrefix(name, "gpushare_") && !documented[name] {
			t.Errorf("%s is exported but not in %s: add a row", name, metricsDoc)
		}
	}
	// Run registers this one only when it elects or follows a leader.
	exported["gpushare_extender_leader"] = true
	for name := range documented {
		if !exported[name] {
			t.Errorf("%s lists %s, which neither the extender nor the device plugin exports", metricsDoc, name)
		}
	}
	if len(documented) < 15 {
		t.Errorf("found %d metrics in %s; the table's parsing is broken", len(documented), metricsDoc)
	}
}
