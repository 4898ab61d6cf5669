package main

import (
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestBuild(t *testing.T) {
	src := fstest.MapFS{
		"GO-2024-0001.json": {Data: []byte(`{"id":"GO-2024-0001","modified":"2024-01-02T00:00:00Z","affected":[{"package":{"name":"golang.org/x/net"}},{"package":{"name":"golang.org/x/net"}}]}`)},
		"GO-2025-0002.json": {Data: []byte(`{"id":"GO-2025-0002","modified":"2025-03-04T00:00:00Z","affected":[{"package":{"name":"stdlib"}},{"package":{"name":"golang.org/x/net"}}]}`)},
		"README.md":         {Data: []byte("not an entry")},
	}
	out := t.TempDir()
	n, newest, err := build(src, out, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 || newest.Format("2006-01-02") != "2025-03-04" {
		t.Errorf("build = %d entries, newest %s; want 2, 2025-03-04", n, newest)
	}
	got := map[string]string{}
	for _, f := range []string{"index/db.json", "index/modules.json", "ID/GO-2024-0001.json"} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		got[f] = string(b)
	}
	want := map[string]string{
		"index/db.json": `{"modified":"2025-03-04T00:00:00Z"}`,
		"index/modules.json": `[{"path":"golang.org/x/net","vulns":[{"id":"GO-2024-0001","modified":"2024-01-02T00:00:00Z"},{"id":"GO-2025-0002","modified":"2025-03-04T00:00:00Z"}]},` +
			`{"path":"stdlib","vulns":[{"id":"GO-2025-0002","modified":"2025-03-04T00:00:00Z"}]}]`,
		"ID/GO-2024-0001.json": string(src["GO-2024-0001.json"].Data),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("database files (-want +got):\n%s", diff)
	}
	if _, _, err := build(fstest.MapFS{"GO-2024-0003.json": {Data: []byte(`{"id":"GO-2024-0004"}`)}}, t.TempDir(), time.Time{}); err == nil {
		t.Error("an entry whose id differs from its file name: want an error")
	}
	// Entries without dates (the repository's data/osv): the fallback.
	undated := fstest.MapFS{"GO-2024-0005.json": {Data: []byte(`{"id":"GO-2024-0005","modified":"0001-01-01T00:00:00Z"}`)}}
	asOf := time.Date(2026, 8, 21, 0, 0, 0, 0, time.UTC)
	if _, got, err := build(undated, t.TempDir(), asOf); err != nil || !got.Equal(asOf) {
		t.Errorf("build of undated entries = %s, %v; want %s", got, err, asOf)
	}
}
