package docs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// repoRoot is the repository root, two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestParse(t *testing.T) {
	md := "# T\n\n" +
		"<!-- test: cluster expect=Allocated -->\n```sh\nkubectl inspect gpushare\n```\n\n" +
		"```sh\nunmarked\n```\n" +
		"<!-- test: skip needs a GPU -->\n\n```yaml\nnot: shell\n```\n" +
		"```text\n<!-- test: make -->\n```\n" +
		"<!-- test: make -->\n```bash\nmake demo\n```\n" +
		"1. step\n   <!-- test: chart -->\n   ```sh\n   helm install a b\n   ```\n"
	got, err := Parse("x.md", md)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Line       int
		Lang, Mode string
		Expect     string
		Text       string
	}
	var rows []row
	for _, b := range got {
		r := row{b.Line, b.Lang, b.Mode, "", b.Text}
		if b.Expect != nil {
			r.Expect = b.Expect.String()
		}
		rows = append(rows, r)
	}
	want := []row{
		{Line: 4, Lang: "sh", Mode: ModeCluster, Expect: "Allocated", Text: "kubectl inspect gpushare\n"},
		{Line: 8, Lang: "sh", Text: "unmarked\n"},
		{Line: 20, Lang: "bash", Mode: ModeMake, Text: "make demo\n"},
		{Line: 25, Lang: "sh", Mode: ModeChart, Text: "   helm install a b\n"},
	}
	if diff := cmp.Diff(want, rows); diff != "" {
		t.Errorf("blocks (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"<!-- test: skip -->\n", "<!-- test: run -->\n", "<!-- test: cluster grep=x -->\n", "```sh\nopen\n"} {
		if _, err := Parse("bad.md", bad); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

func TestCommands(t *testing.T) {
	got := Commands("# a comment\nhelm install gpushare x -n kube-system \\\n  --set a=b   # why\n\nmake demo\necho '# not a comment'\n")
	want := []string{"helm install gpushare x -n kube-system --set a=b", "make demo", "echo '# not a comment'"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"helm", "install", "--set", "a=b c", "x"}, Fields(`helm install --set "a=b c" 'x'`)); diff != "" {
		t.Errorf("Fields (-want +got):\n%s", diff)
	}
}

// TestEveryShellBlockIsTested: every shell block of the docs says which
// test runs it, and each block no test can run is listed here, skipped,
// with the reason its marker gives.
func TestEveryShellBlockIsTested(t *testing.T) {
	blocks, err := Load(repoRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, b := range blocks {
		counts[b.Mode]++
		if b.Mode == "" {
			t.Errorf("%s: a %s block without a marker: say which test runs it (<!-- test: cluster|chart|make -->) or why none can (<!-- test: skip REASON -->)", b, b.Lang)
		}
	}
	t.Logf("shell blocks: %d on the demo cluster, %d helm commands rendered, %d make commands dry-run, %d skipped",
		counts[ModeCluster], counts[ModeChart], counts[ModeMake], counts[ModeSkip])
	if counts[ModeCluster] < 5 || counts[ModeChart] < 3 {
		t.Errorf("only %d cluster and %d chart blocks found: the parser or the markers are broken", counts[ModeCluster], counts[ModeChart])
	}
	for _, b := range blocks {
		if b.Mode != ModeSkip {
			continue
		}
		t.Run(strings.ReplaceAll(b.String(), "/", "_"), func(t *testing.T) {
			t.Skipf("not run: %s\n%s", b.Reason, b.Text)
		})
	}
}

// TestMakeCommands dry-runs (make -n) every make command of a make block:
// the target exists and its recipe expands with the variables given. The
// targets themselves run elsewhere: make demo's cluster in test/kubelet,
// make release's logic in pkg/build/release, make test is this run.
func TestMakeCommands(t *testing.T) {
	root := repoRoot(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	blocks, err := Load(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if b.Mode != ModeMake {
			continue
		}
		for _, c := range Commands(b.Text) {
			args := Fields(c)
			if len(args) < 2 || args[0] != "make" {
				t.Errorf("%s: %q: a make block holds make commands only", b, c)
				continue
			}
			cmd := exec.Command("make", append([]string{"-n"}, args[1:]...)...)
			cmd.Dir = root
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil {
				t.Errorf("%s: make -n %s: %v\n%s", b, strings.Join(args[1:], " "), err, out.String())
			}
		}
	}
}

// mdLink matches a Markdown link's target.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinks: every relative link of the docs names a file or directory
// of the repository.
func TestLinks(t *testing.T) {
	root := repoRoot(t)
	files, err := Files(root)
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "CHANGELOG.md")
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, frag, _ := strings.Cut(target, "#")
			p := filepath.Join(root, filepath.Dir(f), filepath.FromSlash(target))
			if target == "" {
				p, target = filepath.Join(root, f), f
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, m[1])
				continue
			}
			if frag == "" || !strings.HasSuffix(p, ".md") {
				continue
			}
			md, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(anchors(string(md)), frag) {
				t.Errorf("%s links to %s, but %s has no heading with the anchor #%s", f, m[1], target, frag)
			}
		}
	}
}

// heading matches a Markdown heading.
var heading = regexp.MustCompile(`(?m)^#{1,6} (.+)$`)

// anchors are the anchors GitHub gives a Markdown file's headings:
// lower case, only letters, digits, spaces, hyphens and underscores kept,
// spaces made hyphens.
func anchors(md string) []string {
	var out []string
	for _, m := range heading.FindAllStringSubmatch(md, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		out = append(out, b.String())
	}
	return out
}

// TestReadmeIsTheDoor: the README stays an entry point (issue 24: at most
// about 300 lines); reference, rationale and evidence live in docs/.
func TestReadmeIsTheDoor(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(data, []byte("\n")); n > 300 {
		t.Errorf("README.md has %d lines; keep it under 300 and move the detail to docs/", n)
	}
}

// TestReadmeStatesMPSTrust: the README says plainly, where users read
// about limits, that mps mode is for tenants that trust each other, and
// links to the trust model in docs/memory-isolation.md (issue 22).
func TestReadmeStatesMPSTrust(t *testing.T) {
	for _, f := range []struct{ path, want string }{
		{"README.md", "`mps` mode is for tenants that trust each other."},
		{"README.md", "(docs/memory-isolation.md#trust-model)"},
		{"docs/memory-isolation.md", "### Trust model\n\nMPS is for tenants that trust each other."},
	} {
		data, err := os.ReadFile(filepath.Join(repoRoot(t), f.path))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), f.want) {
			t.Errorf("%s does not say %q", f.path, f.want)
		}
	}
}

// makeTarget matches a Makefile rule's target at a line's start.
var makeTarget = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):`)

// docMake matches `make TARGET` in a doc's inline code.
var docMake = regexp.MustCompile("`make ([a-z][a-z0-9-]*)")

// TestDocsNameExistingMakeTargets: every `make TARGET` the docs name in
// their prose (the blocks are dry-run by TestMakeCommands) is a target of
// the Makefile. So a doc cannot keep a target the Makefile lost.
func TestDocsNameExistingMakeTargets(t *testing.T) {
	root := repoRoot(t)
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	files, err := Files(root)
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
			for _, m := range docMake.FindAllStringSubmatch(line, -1) {
				n++
				if !targets[m[1]] {
					t.Errorf("%s:%d names make %s, which the Makefile has no target for", f, i+1, m[1])
				}
			}
		}
	}
	if n < 20 {
		t.Errorf("found %d make targets in the docs; the pattern is broken", n)
	}
}
