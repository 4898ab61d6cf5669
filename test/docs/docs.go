package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// The modes of a marker.
const (
	ModeCluster = "cluster"
	ModeChart   = "chart"
	ModeMake    = "make"
	ModeSkip    = "skip"
)

// ExampleNode is the node name the docs use in commands; the tests that
// run them substitute a node of their cluster.
const ExampleNode = "gpu-node-1"

// Block is one fenced shell block of a Markdown file.
type Block struct {
	// File is the Markdown file, relative to the repository root, with
	// slashes.
	File string
	// Line is the fence's line number (1-based).
	Line int
	// Lang is the fence's language: sh, bash, shell or console.
	Lang string
	// Mode is the marker's mode; empty when the block has no marker.
	Mode string
	// Reason is a skip marker's reason.
	Reason string
	// Expect is a cluster marker's expected output, or nil.
	Expect *regexp.Regexp
	// Text is the block's content, without the fences.
	Text string
}

// String names the block for messages: "docs/install.md:42".
func (b Block) String() string { return fmt.Sprintf("%s:%d", b.File, b.Line) }

// shellLangs are the fence languages whose blocks are commands.
var shellLangs = []string{"sh", "bash", "shell", "console"}

var (
	fence  = regexp.MustCompile("^(\\s*)(```+|~~~+)\\s*([A-Za-z0-9_+-]*)")
	marker = regexp.MustCompile(`^\s*<!--\s*test:\s*([a-z]+)\s*(.*?)\s*-->\s*$`)
)

// Parse reads the fenced shell blocks of one Markdown file's content; file
// names it in the blocks. A malformed marker is an error.
func Parse(file, content string) ([]Block, error) {
	var (
		out     []Block
		pending *Block // a marker read on the line before
		open    *Block // the shell block being read
		inOther string // the fence of a non-shell block being skipped
		body    []string
	)
	sc := bufio.NewScanner(strings.NewReader(content))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case open != nil:
			if strings.TrimSpace(line) == "```" {
				open.Text = strings.Join(body, "\n") + "\n"
				out = append(out, *open)
				open, body = nil, nil
				continue
			}
			body = append(body, line)
			continue
		case inOther != "":
			if strings.HasPrefix(strings.TrimSpace(line), inOther) {
				inOther = ""
			}
			continue
		}
		if m := marker.FindStringSubmatch(line); m != nil {
			b, err := parseMarker(file, n, m[1], m[2])
			if err != nil {
				return nil, err
			}
			pending = &b
			continue
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			if !slices.Contains(shellLangs, m[3]) || !strings.HasPrefix(m[2], "```") {
				inOther = m[2]
				pending = nil
				continue
			}
			b := Block{File: file, Line: n, Lang: m[3]}
			if pending != nil {
				b.Mode, b.Reason, b.Expect = pending.Mode, pending.Reason, pending.Expect
			}
			open, pending = &b, nil
			continue
		}
		if strings.TrimSpace(line) != "" {
			pending = nil // a marker belongs to the fence right after it
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	if open != nil {
		return nil, fmt.Errorf("%s: the block opened there is never closed", open)
	}
	return out, nil
}

// parseMarker reads a marker's mode and arguments.
func parseMarker(file string, line int, mode, args string) (Block, error) {
	b := Block{File: file, Line: line, Mode: mode}
	switch mode {
	case ModeSkip:
		if args == "" {
			return b, fmt.Errorf("%s: a skip marker needs the reason (<!-- test: skip REASON -->)", b)
		}
		b.Reason = args
	case ModeCluster:
		if args == "" {
			break
		}
		re, ok := strings.CutPrefix(args, "expect=")
		if !ok {
			return b, fmt.Errorf("%s: a cluster marker takes only expect=REGEXP, not %q", b, args)
		}
		var err error
		if b.Expect, err = regexp.Compile(re); err != nil {
			return b, fmt.Errorf("%s: expect=%s: %w", b, re, err)
		}
	case ModeChart, ModeMake:
		if args != "" {
			return b, fmt.Errorf("%s: a %s marker takes no arguments, got %q", b, mode, args)
		}
	default:
		return b, fmt.Errorf("%s: unknown marker mode %q (cluster, chart, make or skip)", b, mode)
	}
	return b, nil
}

// Files are the Markdown files whose commands are tested, relative to the
// repository root: README.md, CONTRIBUTING.md, SECURITY.md, everything
// under docs/, and the chart's README.
func Files(root string) ([]string, error) {
	files := []string{"README.md", "CONTRIBUTING.md", "SECURITY.md", "manifests/charts/gpushare/README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing docs/: %w", err)
	}
	return files, nil
}

// Load parses every file of Files, in Order.
func Load(root string) ([]Block, error) {
	files, err := Files(root)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(files, func(a, b string) int { return orderOf(a) - orderOf(b) })
	var out []Block
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		blocks, err := Parse(f, string(data))
		if err != nil {
			return nil, err
		}
		out = append(out, blocks...)
	}
	return out, nil
}

// Order is the order the files' commands run in, as a user would meet
// them: install first, uninstall last; files not named run in between, by
// name.
var Order = []string{"README.md", "docs/install.md", "docs/user-guide.md", "docs/coexistence.md", "docs/memory-isolation.md", "docs/operations/troubleshooting.md"}

// last run after every other file.
var last = []string{"docs/uninstall.md"}

func orderOf(file string) int {
	if i := slices.Index(Order, file); i >= 0 {
		return i
	}
	if i := slices.Index(last, file); i >= 0 {
		return 1000 + i
	}
	return 500
}

// Commands splits a block into its commands: lines joined where they end
// in a backslash, comments (from a # at a line's start or after a space)
// and empty lines dropped.
func Commands(text string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		line = stripComment(line)
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\"))
			cur.WriteString(" ")
			continue
		}
		cur.WriteString(line)
		if c := strings.Join(strings.Fields(cur.String()), " "); c != "" {
			out = append(out, c)
		}
		cur.Reset()
	}
	return out
}

// stripComment drops a shell comment outside quotes.
func stripComment(line string) string {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimRight(line[:i], " \t")
		}
	}
	return strings.TrimRight(line, " \t")
}

// Fields splits a command into words as a shell would for the simple
// commands the docs hold: spaces separate, single and double quotes group
// (and are removed).
func Fields(cmd string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	inWord := false
	for _, r := range cmd {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
				continue
			}
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out
}
