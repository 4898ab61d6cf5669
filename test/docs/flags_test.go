package docs

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/extender"
)

// usageFlag matches a flag in Go's flag usage: "  -name" at a line's start.
var usageFlag = regexp.MustCompile(`(?m)^  -([a-z0-9_-]+)`)

// usageArg matches a flag's line in the usage with its argument name, the
// rest of the line.
var usageArg = regexp.MustCompile(`(?m)^  -([a-z0-9_-]+) (.+)$`)

// docFlagRow matches a row of a reference's flags table: its first cell
// names one or more flags in backquotes.
var docFlagRow = regexp.MustCompile("(?m)^\\| (`--?[a-z0-9-]+`[^|]*)\\|")

// docFlag matches one flag in such a cell.
var docFlag = regexp.MustCompile("`--?([a-z0-9-]+)`")

// TestReferenceFlags: the flags tables of docs/reference name exactly the
// flags the programs have, klog's left out but for -v. So a doc cannot keep
// a flag the code dropped, nor miss one it added.
func TestReferenceFlags(t *testing.T) {
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	tests := []struct {
		doc   string
		parse func([]string, io.Writer) error
	}{
		{doc: "docs/reference/device-plugin.md", parse: func(args []string, out io.Writer) error {
			_, _, err := deviceplugin.ParseFlags(args, out)
			return err
		}},
		{doc: "docs/reference/extender.md", parse: func(args []string, out io.Writer) error {
			_, _, err := extender.ParseFlags(args, out)
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.doc), func(t *testing.T) {
			var usage bytes.Buffer
			if err := tt.parse([]string{"-help"}, &usage); !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("-help: %v, want flag.ErrHelp", err)
			}
			var have []string
			for _, m := range usageFlag.FindAllStringSubmatch(usage.String(), -1) {
				if klogFlags.Lookup(m[1]) == nil || m[1] == "v" {
					have = append(have, m[1])
				}
			}
			data, err := os.ReadFile(filepath.Join(repoRoot(t), tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			var documented []string
			for _, row := range docFlagRow.FindAllStringSubmatch(string(data), -1) {
				for _, f := range docFlag.FindAllStringSubmatch(row[1], -1) {
					documented = append(documented, f[1])
				}
			}
			slices.Sort(have)
			slices.Sort(documented)
			documented = slices.Compact(documented)
			if len(have) < 10 {
				t.Fatalf("found %d flags in the usage; the pattern is broken:\n%s", len(have), usage.String())
			}
			if diff := cmp.Diff(have, documented); diff != "" {
				t.Errorf("the flags of %s (-the program's +the doc's table):\n%s\nAdd a row for each flag the program has, and drop each the doc names but the program lacks.", tt.doc, diff)
			}
			for _, m := range usageArg.FindAllStringSubmatch(usage.String(), -1) {
				if strings.Contains(m[2], " ") {
					t.Errorf("-%s's argument name reads %q: its usage's back-quoted text became the name (Go's flag package does that)", m[1], m[2])
				}
			}
		})
	}
}
