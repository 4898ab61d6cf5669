package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/test/util"
)

var update = flag.Bool("update", false, "rewrite testdata/")

func TestParsePlatforms(t *testing.T) {
	got, err := ParsePlatforms("linux/amd64, linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Platform{{"linux", "amd64"}, {"linux", "arm64"}}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	for _, bad := range []string{"linux", "linux/", "/amd64", "linux/amd64,linux/amd64", "linux/arm/v7"} {
		if _, err := ParsePlatforms(bad); err == nil {
			t.Errorf("ParsePlatforms(%q): no error", bad)
		}
	}
}

// TestTarGz: the archive holds the files, in order, with their modes and
// no owner names or times, and the same files give the same bytes.
func TestTarGz(t *testing.T) {
	dir := t.TempDir()
	bin, lic := filepath.Join(dir, "bin"), filepath.Join(dir, "LICENSE")
	for p, data := range map[string]string{bin: "\x7fELF...", lic: "Apache License\n"} {
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	files := []ArchiveFile{{Name: "kubectl-inspect-gpushare", Source: bin, Mode: 0o755}, {Name: "LICENSE", Source: lic, Mode: 0o644}}
	var a, b bytes.Buffer
	if err := TarGz(&a, files); err != nil {
		t.Fatal(err)
	}
	later := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) // the files' own times must not matter
	if err := os.Chtimes(bin, later, later); err != nil {
		t.Fatal(err)
	}
	if err := TarGz(&b, files); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("two archives of the same files differ")
	}
	zr, err := gzip.NewReader(&a)
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		Name  string
		Mode  int64
		Data  string
		MTime int64
		Owner string
	}
	var got []entry
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, entry{hdr.Name, hdr.Mode, string(data), hdr.ModTime.Unix(), hdr.Uname + hdr.Gname})
	}
	want := []entry{{Name: "kubectl-inspect-gpushare", Mode: 0o755, Data: "\x7fELF..."}, {Name: "LICENSE", Mode: 0o644, Data: "Apache License\n"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("archive entries (-want +got):\n%s", diff)
	}
}

// TestChecksums: SHA256SUMS lists every file but itself, and sha256sum -c
// accepts it (and refuses it once a file changes).
func TestChecksums(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"gpushare-0.1.0.tgz": "chart", "b_v0.1.0_linux_amd64": "bin", ChecksumsFile: "stale"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	sums, err := Checksums(dir)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(sums)), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "  b_v0.1.0_linux_amd64") || !strings.HasSuffix(lines[1], "  gpushare-0.1.0.tgz") {
		t.Fatalf("SHA256SUMS:\n%s\nwant the two files, sorted, without itself or the directory", sums)
	}
	if err := os.WriteFile(filepath.Join(dir, ChecksumsFile), sums, 0o600); err != nil {
		t.Fatal(err)
	}
	sha256sum, err := exec.LookPath("sha256sum")
	if err != nil {
		t.Skip("no sha256sum to check the list with")
	}
	check := func() error {
		cmd := exec.Command(sha256sum, "-c", ChecksumsFile)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			return errors.New(string(out))
		}
		return nil
	}
	if err := check(); err != nil {
		t.Errorf("sha256sum -c SHA256SUMS: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "gpushare-0.1.0.tgz"), []byte("changed"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := check(); err == nil {
		t.Error("sha256sum -c accepts a changed file")
	}
}

// TestKrewManifest: the manifest krew installs the plugin from, as a
// golden file, and what krew reads of it.
func TestKrewManifest(t *testing.T) {
	archives := []KrewArchive{
		{Platform: Platform{"linux", "amd64"}, Name: ArchiveName("kubectl-inspect-gpushare", "v0.1.0", Platform{"linux", "amd64"}), SHA256: strings.Repeat("a", 64)},
		{Platform: Platform{"linux", "arm64"}, Name: ArchiveName("kubectl-inspect-gpushare", "v0.1.0", Platform{"linux", "arm64"}), SHA256: strings.Repeat("b", 64)},
	}
	got, err := KrewManifest("v0.1.0", "https://github.com/gpushare/gpushare/releases/download/v0.1.0/", archives)
	if err != nil {
		t.Fatal(err)
	}
	util.Golden(t, "krew-inspect-gpushare.yaml", string(got), *update)
	var m krewPlugin
	if err := yaml.UnmarshalStrict(got, &m); err != nil {
		t.Fatal(err)
	}
	if m.Metadata.Name != KrewPluginName || len(m.Spec.Platforms) != 2 ||
		m.Spec.Platforms[1].URI != "https://github.com/gpushare/gpushare/releases/download/v0.1.0/kubectl-inspect-gpushare_v0.1.0_linux_arm64.tar.gz" {
		t.Errorf("manifest %+v", m)
	}
	if _, err := KrewManifest("v0.1.0", "https://x/", []KrewArchive{{Name: "a", SHA256: "short"}}); err == nil {
		t.Error("a short sha256: no error")
	}
}

func TestCrossCompiler(t *testing.T) {
	amd, arm := Platform{"linux", "amd64"}, Platform{"linux", "arm64"}
	for _, tc := range []struct {
		host, target Platform
		want         string
		wantErr      bool
	}{
		{host: amd, target: amd, want: ""},
		{host: amd, target: arm, want: "aarch64-linux-gnu-gcc"},
		{host: arm, target: amd, want: "x86_64-linux-gnu-gcc"},
		{host: amd, target: Platform{"darwin", "arm64"}, wantErr: true},
	} {
		got, err := CrossCompiler(tc.host, tc.target)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("CrossCompiler(%s, %s) = %q, %v; want %q, error %v", tc.host, tc.target, got, err, tc.want, tc.wantErr)
		}
	}
}
