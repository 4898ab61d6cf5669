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
	"github.com/gpushare/gpushare/pkg/build/oci"
)

// fakeGo stands in for the go command and the C cross compilers: `go
// build -o OUT PKG` copies a small static program to OUT and records the
// environment it was asked to build with; LookPath finds only the
// compilers in cc.
type fakeGo struct {
	programs map[string]string // GOARCH -> a static executable for it
	cc       map[string]bool   // cross compilers on PATH
	builds   []string          // "GOOS/GOARCH CGO_ENABLED CC PKG", one per build
	dirs     map[string]string // PKG -> the directory go build ran in
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
	program, ok := f.programs[env["GOARCH"]]
	if !ok {
		return fmt.Errorf("fake go: no program for GOARCH %s", env["GOARCH"])
	}
	data, err := os.ReadFile(program)
	if err != nil {
		return err
	}
	return os.WriteFile(c.Args[i+1], data, 0o755) //nolint:gosec // a fake binary
}

// staticPrograms builds a tiny static program for each architecture, for
// the fake builds.
func staticPrograms(t *testing.T, archs ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, a := range archs {
		out[a] = staticProgram(t, a)
	}
	return out
}

// staticProgram builds a tiny static program for GOARCH arch.
func staticProgram(t *testing.T, arch string) string {
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
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS=linux", "GOARCH="+arch)
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
	fake := &fakeGo{programs: staticPrograms(t, host.Arch, other.Arch), cc: map[string]bool{cc: true}}
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "gpushare-0.1.0.tgz"), []byte("the chart"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	cfg := Config{
		Version: "v0.1.0", Revision: "0123456789abcdef0123456789abcdef01234567", Platforms: []Platform{host, other},
		Dir: repo, Out: out, URLBase: "https://example.com/v0.1.0", Registry: "registry.example.com/team", Go: "go", Runner: fake, Stdout: &stdout, Stderr: io.Discard,
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
			want = append(want, BinaryName(name, "v0.1.0", p), ImageName(name, "v0.1.0", p))
		}
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

	// Each platform's image holds that platform's binary and is named in
	// the registry the release is for.
	for _, p := range cfg.Platforms {
		l := readImageArchive(t, filepath.Join(out, ImageName("gpushare-device-plugin", "v0.1.0", p)))
		if got := l.Config.OS + "/" + l.Config.Architecture; got != p.String() {
			t.Errorf("the %s image of the device plugin is for %s", p, got)
		}
		if got, want := l.Descriptor.Annotations[oci.AnnotationContainerdName], "registry.example.com/team/gpushare-device-plugin:v0.1.0"; got != want {
			t.Errorf("the %s image is named %q, want %q", p, got, want)
		}
	}
	if strings.Contains(stdout.String(), "built for "+host.String()+" only") {
		t.Errorf("a release for two platforms says it built one:\n%s", stdout.String())
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

// readImageArchive reads a release's image archive (an oci-archive of one
// image) back, verified.
func readImageArchive(t *testing.T, p string) *oci.Layout {
	t.Helper()
	f, err := os.Open(p) //nolint:gosec // the test's release
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	dir := t.TempDir()
	if err := oci.Unarchive(f, dir); err != nil {
		t.Fatal(err)
	}
	l, err := oci.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestRunOnePlatform: a release for the host's platform alone (make
// release's default) builds no cross compiler's programs and ends saying
// how to build the others.
func TestRunOnePlatform(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the Go-native image builder runs on Linux only")
	}
	repo, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	host := HostPlatform()
	fake := &fakeGo{programs: staticPrograms(t, host.Arch)}
	var stdout bytes.Buffer
	cfg := Config{
		Version: "v0.1.0", Revision: "abc", Platforms: []Platform{host}, Dir: repo, Out: t.TempDir(),
		URLBase: "https://example.com/v0.1.0", Go: "go", Runner: fake, Stdout: &stdout, Stderr: io.Discard,
	}
	if err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	for _, b := range fake.builds {
		if !strings.HasPrefix(b, host.String()+" ") || strings.Contains(b, "cc=-") || !strings.Contains(b, "cc= ") {
			t.Errorf("build %q: want %s without a cross compiler", b, host)
		}
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if diff := cmp.Diff(MorePlatformsHint(host), lines[len(lines)-1]); diff != "" {
		t.Errorf("last line (-want +got):\n%s", diff)
	}
}

// TestMorePlatformsHint: the hint names every known platform and the
// cross compiler of each other one.
func TestMorePlatformsHint(t *testing.T) {
	got := MorePlatformsHint(Platform{OS: "linux", Arch: "amd64"})
	want := "release: built for linux/amd64 only (this host's platform); for more: make release PLATFORMS=linux/amd64,linux/arm64 (the device plugin and the DRA driver need cgo: apt-get install gcc-aarch64-linux-gnu)"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
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
