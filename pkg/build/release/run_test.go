package release

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/build/image"
)

// fakeGo stands in for the go command and the C cross compilers: `go
// build -o OUT PKG` copies a small static program to OUT and records the
// environment it was asked to build with; LookPath finds only the
// compilers in cc.
type fakeGo struct {
	program string            // a static executable
	cc      map[string]bool   // cross compilers on PATH
	builds  []string          // "GOOS/GOARCH CGO_ENABLED CC PKG", one per build
	dirs    map[string]string // PKG -> the directory go build ran in
}

var _ image.Runner = (*fakeGo)(nil)

func (f *fakeGo) LookPath(file string) (string, error) {
	if f.cc[file] {
		return "/usr/bin/" + file, nil
	}
	return "", exec.ErrNotFound
}

func (f *fakeGo) Run(_ context.Context, c image.Command, _, _ io.Writer) error {
	i := slices.Index(c.Args, "-o")
	if c.Args[0] != "build" || i < 0 {
		return fmt.Errorf("unexpected command %s", c)
	}
	env := map[string]string{"GOOS": runtime.GOOS, "GOARCH": runtime.GOARCH}
	for _, kv := range c.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	f.builds = append(f.builds, fmt.Sprintf("%s/%s cgo=%s cc=%s %s", env["GOOS"], env["GOARCH"], env["CGO_ENABLED"], env["CC"], c.Args[len(c.Args)-1]))
	if f.dirs == nil {
		f.dirs = map[string]string{}
	}
	f.dirs[c.Args[len(c.Args)-1]] = c.Dir
	data, err := os.ReadFile(f.program)
	if err != nil {
		return err
	}
	return os.WriteFile(c.Args[i+1], data, 0o755) //nolint:gosec // a fake binary
}

// staticProgram builds a tiny static program for the fake builds.
func staticProgram(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module fake\n\ngo 1.25\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "fake")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the fake program: %v\n%s", err, b)
	}
	return out
}

// TestRun runs the whole release with a fake go: every file is there
// under its release name, the krew manifest names the archives with their
// digests, SHA256SUMS covers everything (the chart package included), and
// the device plugin and the DRA driver (in its own module) for another
// architecture are built with that architecture's C compiler.
func TestRun(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the Go-native image builder runs on Linux only")
	}
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	host := Platform{OS: "linux", Arch: runtime.GOARCH}
	other := Platform{OS: "linux", Arch: map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]}
	if other.Arch == "" {
		t.Skipf("no second architecture known beside %s", runtime.GOARCH)
	}
	cc, _ := CrossCompiler(host, other)
	fake := &fakeGo{program: staticProgram(t), cc: map[string]bool{cc: true}}
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "gpushare-0.1.0.tgz"), []byte("the chart"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cfg := Config{
		Version: "v0.1.0", Revision: "0123456789abcdef0123456789abcdef01234567", Platforms: []Platform{host, other},
		Dir: repo, Out: out, URLBase: "https://example.com/v0.1.0", Go: "go", Runner: fake, Stdout: &stdout, Stderr: io.Discard,
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}

	var want []string
	for _, name := range []string{"gpushare-scheduler-extender", "kubectl-inspect-gpushare", "gpushare-device-plugin", "gpushare-dra-driver"} {
		for _, p := range cfg.Platforms {
			want = append(want, BinaryName(name, "v0.1.0", p))
		}
		want = append(want, ImageName(name, "v0.1.0", host))
	}
	for _, p := range cfg.Platforms {
		want = append(want, BinaryName("gpushare-simulate", "v0.1.0", p), ArchiveName("kubectl-inspect-gpushare", "v0.1.0", p))
	}
	want = append(want, "gpushare-0.1.0.tgz", "inspect-gpushare.yaml", ChecksumsFile)
	slices.Sort(want)
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("release files (-want +got):\n%s", diff)
	}

	sums, err := os.ReadFile(filepath.Join(out, ChecksumsFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(sums), "\n"); n != len(want)-1 {
		t.Errorf("SHA256SUMS lists %d files, want %d:\n%s", n, len(want)-1, sums)
	}
	var m krewPlugin
	data, err := os.ReadFile(filepath.Join(out, "inspect-gpushare.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, p := range m.Spec.Platforms {
		name := ArchiveName("kubectl-inspect-gpushare", "v0.1.0", Platform{p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]})
		if p.URI != "https://example.com/v0.1.0/"+name {
			t.Errorf("krew uri %s, want it under the URL base", p.URI)
		}
		if !strings.Contains(string(sums), p.SHA256+"  "+name+"\n") {
			t.Errorf("krew sha256 %s of %s is not SHA256SUMS's", p.SHA256, name)
		}
	}
	for _, pkg := range []string{"./deviceplugin", "./cmd/gpushare-dra-driver"} {
		wantCross := fmt.Sprintf("%s cgo=1 cc=%s %s", other, cc, pkg)
		if !slices.Contains(fake.builds, wantCross) {
			t.Errorf("builds %q: none is %q", fake.builds, wantCross)
		}
	}
	// The DRA driver is its own module: go build runs in dra/.
	if got, want := fake.dirs["./cmd/gpushare-dra-driver"], filepath.Join(repo, "dra"); got != want {
		t.Errorf("the DRA driver was built in %q, want %q", got, want)
	}

	// Without the cross compiler the release stops before building
	// anything, saying what to install.
	fake.cc, fake.builds = nil, nil
	cfg.Out = t.TempDir()
	err = Run(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "apt-get install gcc-") || !strings.Contains(err.Error(), "PLATFORMS="+host.String()) {
		t.Errorf("without %s: err = %v, want the package to install and PLATFORMS to drop", cc, err)
	}
	if len(fake.builds) != 0 {
		t.Errorf("without %s the release built %q first; want it to stop before building", cc, fake.builds)
	}
}

func TestValidate(t *testing.T) {
	ok := Config{Version: "v0.1.0", Platforms: []Platform{{"linux", "amd64"}}}
	if err := ok.Validate(); err != nil {
		t.Errorf("%+v: %v", ok, err)
	}
	for _, bad := range []Config{
		{Version: "v0.1.0"},
		{Version: "v0.1.0", Platforms: []Platform{{"darwin", "arm64"}}},
		{Version: "dev", Platforms: []Platform{{"linux", "amd64"}}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
