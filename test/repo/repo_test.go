package repo

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// maxTrackedBytes bounds a tracked file: the largest today is an openb
// trace under pkg/simulator/testdata (0.6 MB).
const maxTrackedBytes = 2 << 20

// executableMagic are the first bytes of the executable formats Go builds:
// ELF, Mach-O (32 and 64 bit, both byte orders) and PE.
var executableMagic = [][]byte{
	{0x7f, 'E', 'L', 'F'},
	{0xfe, 0xed, 0xfa, 0xce}, {0xce, 0xfa, 0xed, 0xfe},
	{0xfe, 0xed, 0xfa, 0xcf}, {0xcf, 0xfa, 0xed, 0xfe},
	{'M', 'Z'},
}

// TestNoBinaryTracked: git tracks no built program and no file over
// maxTrackedBytes (a `go build ./extender` once committed a 74 MB
// extender/extender). Outside a git checkout there is nothing to check.
func TestNoBinaryTracked(t *testing.T) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout (%v): nothing to check", err)
	}
	root := strings.TrimSpace(string(top))
	out, err := exec.Command("git", "-C", root, "ls-files", "-z").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	if len(files) < 100 {
		t.Fatalf("git ls-files lists %d files; the checkout at %s looks wrong", len(files), root)
	}
	for _, name := range files {
		path := filepath.Join(root, name)
		info, err := os.Lstat(path)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		if info.Size() > maxTrackedBytes {
			t.Errorf("%s is tracked and has %d bytes (over %d): build outputs and data belong outside git", name, info.Size(), maxTrackedBytes)
		}
		head, err := readHead(path, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range executableMagic {
			if bytes.HasPrefix(head, m) && (len(m) > 2 || strings.HasSuffix(name, ".exe")) {
				t.Errorf("%s is a tracked executable (starts with % x): remove it (git rm --cached) and ignore it in .gitignore", name, m)
			}
		}
	}
}

func readHead(path string, n int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	k, err := io.ReadFull(f, b)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b[:k], nil
}
