package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// entry is the part of an OSV entry the index needs.
type entry struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
	Affected []struct {
		Package struct {
			Name string `json:"name"`
		} `json:"package"`
	} `json:"affected"`
}

// moduleVuln and moduleMeta are index/modules.json's records. Fixed is
// left out: govulncheck then reads every entry of a module it finds and
// decides by the entry's own ranges, which is slower, never wrong.
type moduleVuln struct {
	ID       string    `json:"id"`
	Modified time.Time `json:"modified"`
}

type moduleMeta struct {
	Path  string       `json:"path"`
	Vulns []moduleVuln `json:"vulns"`
}

// build reads every GO-*.json of src and writes the database under out. It
// returns the number of entries and the database's modification time: the
// newest entry's, or fallback when no entry carries one.
func build(src fs.FS, out string, fallback time.Time) (int, time.Time, error) {
	names, err := fs.Glob(src, "GO-*.json")
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("listing the OSV entries: %w", err)
	}
	if len(names) == 0 {
		return 0, time.Time{}, fmt.Errorf("no GO-*.json entries found")
	}
	if err := os.MkdirAll(filepath.Join(out, "ID"), 0o755); err != nil { //nolint:gosec // a public database
		return 0, time.Time{}, fmt.Errorf("creating %s: %w", out, err)
	}
	modules := map[string]*moduleMeta{}
	var newest time.Time
	for _, name := range names {
		data, err := fs.ReadFile(src, name)
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("reading %s: %w", name, err)
		}
		var e entry
		if err := json.Unmarshal(data, &e); err != nil {
			return 0, time.Time{}, fmt.Errorf("decoding %s: %w", name, err)
		}
		if e.ID == "" || e.ID+".json" != path.Base(name) {
			return 0, time.Time{}, fmt.Errorf("%s: id %q does not match the file name", name, e.ID)
		}
		if e.Modified.After(newest) {
			newest = e.Modified
		}
		seen := map[string]bool{}
		for _, a := range e.Affected {
			p := a.Package.Name
			if p == "" || seen[p] {
				continue
			}
			seen[p] = true
			if modules[p] == nil {
				modules[p] = &moduleMeta{Path: p}
			}
			modules[p].Vulns = append(modules[p].Vulns, moduleVuln{ID: e.ID, Modified: e.Modified})
		}
		if err := os.WriteFile(filepath.Join(out, "ID", e.ID+".json"), data, 0o644); err != nil { //nolint:gosec // a public database
			return 0, time.Time{}, fmt.Errorf("writing %s: %w", e.ID, err)
		}
	}
	if newest.IsZero() {
		newest = fallback
	}
	list := make([]*moduleMeta, 0, len(modules))
	for _, m := range modules {
		slices.SortFunc(m.Vulns, func(a, b moduleVuln) int { return strings.Compare(a.ID, b.ID) })
		list = append(list, m)
	}
	slices.SortFunc(list, func(a, b *moduleMeta) int { return strings.Compare(a.Path, b.Path) })
	if err := os.MkdirAll(filepath.Join(out, "index"), 0o755); err != nil { //nolint:gosec // a public database
		return 0, time.Time{}, fmt.Errorf("creating the index: %w", err)
	}
	for file, v := range map[string]any{"db.json": map[string]time.Time{"modified": newest}, "modules.json": list} {
		data, err := json.Marshal(v)
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("encoding %s: %w", file, err)
		}
		if err := os.WriteFile(filepath.Join(out, "index", file), data, 0o644); err != nil { //nolint:gosec // a public database
			return 0, time.Time{}, fmt.Errorf("writing %s: %w", file, err)
		}
	}
	return len(names), newest, nil
}
