package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The markers around the generated values table in the chart's README.
const (
	tableStart = "<!-- values table: generated from values.yaml by test/chart TestChartReadme (make chart-update); do not edit -->\n"
	tableEnd   = "<!-- end of values table -->\n"
)

// TestChartReadme: every value of values.yaml carries a comment, and the
// chart's README holds the table generated from those comments, byte for
// byte; -update rewrites it.
func TestChartReadme(t *testing.T) {
	dir, values := chartValues(t)
	if len(values) < 40 {
		t.Fatalf("values.yaml yields %d values; the parser lost some", len(values))
	}
	for _, v := range values {
		if v.Doc == "" {
			t.Errorf("values.yaml: %s has no comment above it; say what it does (the README's table is made from the comments)", v.Key)
		}
	}
	readmePath := filepath.Join(dir, "README.md")
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(readme), tableStart)
	end := strings.Index(string(readme), tableEnd)
	if start < 0 || end < start {
		t.Fatalf("%s has no values table between the markers %q and %q", readmePath, tableStart, tableEnd)
	}
	want := ValuesTable(values)
	got := string(readme[start+len(tableStart) : end])
	if *update {
		out := string(readme[:start+len(tableStart)]) + want + string(readme[end:])
		if err := os.WriteFile(readmePath, []byte(out), 0o644); err != nil { //nolint:gosec // a README
			t.Fatal(err)
		}
		return
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the values table of %s is not values.yaml's (-values.yaml +README); run make chart-update:\n%s", readmePath, diff)
	}
}

// chartValues returns the chart's directory and its documented values.
func chartValues(t *testing.T) (string, []Value) {
	t.Helper()
	dir, err := ChartDir()
	if err != nil {
		t.Fatal(err)
	}
	values, err := valuesOf(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, values
}

// valuesRef matches a template's reference to a value.
var valuesRef = regexp.MustCompile(`\.Values\.([A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)*)`)

// TestTemplatesUseDocumentedValues: every value a template reads is in
// values.yaml (so documented), and every documented value is read by a
// template.
func TestTemplatesUseDocumentedValues(t *testing.T) {
	dir, values := chartValues(t)
	files, err := filepath.Glob(filepath.Join(dir, "templates", "*"))
	if err != nil {
		t.Fatal(err)
	}
	refs := map[string]bool{} // dotted path a template reads -> true
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range valuesRef.FindAllStringSubmatch(string(src), -1) {
			refs[m[1]] = true
		}
	}
	known := func(ref string) bool {
		for _, v := range values {
			if v.Key == ref || strings.HasPrefix(v.Key, ref+".") || strings.HasPrefix(ref, v.Key+".") {
				return true
			}
		}
		return false
	}
	for ref := range refs {
		if !known(ref) {
			t.Errorf("a template reads .Values.%s, which values.yaml does not document", ref)
		}
	}
	for _, v := range values {
		used := false
		for ref := range refs {
			if ref == v.Key || strings.HasPrefix(ref, v.Key+".") || strings.HasPrefix(v.Key, ref+".") {
				used = true
				break
			}
		}
		if !used {
			t.Errorf("values.yaml documents %s, which no template reads", v.Key)
		}
	}
}
