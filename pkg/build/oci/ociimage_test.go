package oci

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// testImage is an image with each kind of entry; source is a host file
// copied in as /usr/local/bin/app.
func testImage(source string) Image {
	return Image{
		Ref:      "registry.example:5000/team/app:v1.2.3",
		Platform: v1.Platform{OS: "linux", Architecture: "amd64"},
		Config: v1.Config{
			User:       "65532:65532",
			Entrypoint: []string{"/usr/local/bin/app"},
			Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			Labels:     map[string]string{"org.opencontainers.image.version": "v1.2.3"},
		},
		Layers: [][]Entry{
			{
				File("/etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/sbin/nologin\n")),
				{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
				{Path: "/home/nonroot", Mode: fs.ModeDir | 0o700, UID: 65532, GID: 65532},
				Symlink("/lib64", "usr/lib64"),
			},
			{
				{Path: "/usr/local/bin/app", Mode: 0o755, Source: source},
			},
		},
	}
}

// entry is what a test compares of a tar entry.
type entry struct {
	Layer    int
	Name     string
	Type     byte
	Mode     int64
	UID, GID int
	Linkname string
	Data     string
	MTime    int64
	Names    string // user and group names: must stay empty
}

// entries lists every entry of every layer of l.
func entries(t *testing.T, l *Layout) []entry {
	t.Helper()
	var got []entry
	err := l.Walk(func(layer int, hdr *tar.Header, r io.Reader) error {
		data, err := io.ReadAll(r)
		got = append(got, entry{Layer: layer, Name: hdr.Name, Type: hdr.Typeflag, Mode: hdr.Mode, UID: hdr.Uid, GID: hdr.Gid,
			Linkname: hdr.Linkname, Data: string(data), MTime: hdr.ModTime.Unix(), Names: hdr.Uname + hdr.Gname})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func writeSource(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "app")
	if err := os.WriteFile(p, []byte("#!app\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestWriteRead: what Write puts in a layout, Read verifies and gives back
// unchanged, with parents added, entries sorted and no times or names.
func TestWriteRead(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	desc, err := Write(dir, testImage(writeSource(t)))
	if err != nil {
		t.Fatal(err)
	}
	l, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []entry{
		{Layer: 0, Name: "etc/", Type: tar.TypeDir, Mode: 0o755},
		{Layer: 0, Name: "etc/passwd", Type: tar.TypeReg, Mode: 0o644, Data: "root:x:0:0:root:/root:/sbin/nologin\n"},
		{Layer: 0, Name: "home/", Type: tar.TypeDir, Mode: 0o755},
		{Layer: 0, Name: "home/nonroot/", Type: tar.TypeDir, Mode: 0o700, UID: 65532, GID: 65532},
		{Layer: 0, Name: "lib64", Type: tar.TypeSymlink, Mode: 0o777, Linkname: "usr/lib64"},
		{Layer: 0, Name: "tmp/", Type: tar.TypeDir, Mode: 0o1777},
		{Layer: 1, Name: "usr/", Type: tar.TypeDir, Mode: 0o755},
		{Layer: 1, Name: "usr/local/", Type: tar.TypeDir, Mode: 0o755},
		{Layer: 1, Name: "usr/local/bin/", Type: tar.TypeDir, Mode: 0o755},
		{Layer: 1, Name: "usr/local/bin/app", Type: tar.TypeReg, Mode: 0o755, Data: "#!app\n"},
	}
	if diff := cmp.Diff(want, entries(t, l)); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
	img := testImage("")
	if diff := cmp.Diff(img.Config, l.Config.Config); diff != "" {
		t.Errorf("runtime config (-want +got):\n%s", diff)
	}
	if l.Config.OS != "linux" || l.Config.Architecture != "amd64" {
		t.Errorf("config platform %s/%s, want linux/amd64", l.Config.OS, l.Config.Architecture)
	}
	wantAnnotations := map[string]string{AnnotationRefName: "v1.2.3", AnnotationContainerdName: img.Ref}
	if diff := cmp.Diff(wantAnnotations, l.Descriptor.Annotations); diff != "" {
		t.Errorf("index annotations (-want +got):\n%s", diff)
	}
	if l.Descriptor.Digest != desc.Digest {
		t.Errorf("index names manifest %s, Write returned %s", l.Descriptor.Digest, desc.Digest)
	}
	if l.Descriptor.MediaType != types.OCIManifestSchema1 || l.Manifest.Config.MediaType != types.OCIConfigJSON || l.Manifest.Layers[0].MediaType != types.OCILayer {
		t.Errorf("media types %s, %s, %s: want the OCI ones", l.Descriptor.MediaType, l.Manifest.Config.MediaType, l.Manifest.Layers[0].MediaType)
	}
	if l.Descriptor.ArtifactType != "" {
		t.Errorf("index descriptor's artifactType %q: an image has none", l.Descriptor.ArtifactType)
	}
	if l.Descriptor.Platform == nil || l.Descriptor.Platform.OS != "linux" || l.Descriptor.Platform.Architecture != "amd64" {
		t.Errorf("index descriptor's platform %+v, want linux/amd64", l.Descriptor.Platform)
	}
	var docker []dockerManifest
	readJSON(t, filepath.Join(dir, "manifest.json"), &docker)
	if len(docker) != 1 || !slices.Equal(docker[0].RepoTags, []string{img.Ref}) {
		t.Errorf("manifest.json %+v: want RepoTags [%s]", docker, img.Ref)
	}
}

func TestContainerdName(t *testing.T) {
	for ref, want := range map[string]string{
		"gpushare-device-plugin:v1":              "docker.io/library/gpushare-device-plugin:v1",
		"acme/gpushare-device-plugin:v1":         "docker.io/acme/gpushare-device-plugin:v1",
		"ghcr.io/acme/gpushare-device-plugin:v1": "ghcr.io/acme/gpushare-device-plugin:v1",
		"registry.example:5000/team/app:v1.2.3":  "registry.example:5000/team/app:v1.2.3",
		"localhost/app:v1":                       "localhost/app:v1",
	} {
		if got := containerdName(ref); got != want {
			t.Errorf("containerdName(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestDeterministic: the same entries in another order, written at another
// time into another directory, give the same digests and archive bytes.
func TestDeterministic(t *testing.T) {
	source := writeSource(t)
	build := func(reverse bool) (v1.Descriptor, []byte) {
		img := testImage(source)
		if reverse {
			slices.Reverse(img.Layers[0])
		}
		dir := filepath.Join(t.TempDir(), "layout")
		desc, err := Write(dir, img)
		if err != nil {
			t.Fatal(err)
		}
		var archive bytes.Buffer
		if err := Archive(&archive, dir); err != nil {
			t.Fatal(err)
		}
		return desc, archive.Bytes()
	}
	d1, a1 := build(false)
	if err := os.Chtimes(source, epoch, epoch); err != nil { // the source's mtime must not matter
		t.Fatal(err)
	}
	d2, a2 := build(true)
	if d1.Digest != d2.Digest {
		t.Errorf("manifest digests differ: %s and %s", d1.Digest, d2.Digest)
	}
	if !bytes.Equal(a1, a2) {
		t.Errorf("archives differ (%d and %d bytes)", len(a1), len(a2))
	}
}

// TestArchiveIsTheLayout: the archive holds exactly the layout's files.
func TestArchiveIsTheLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	if _, err := Write(dir, testImage(writeSource(t))); err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := Archive(&archive, dir); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	tr := tar.NewReader(&archive)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(out, filepath.FromSlash(hdr.Name))
		if hdr.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Read(out); err != nil {
		t.Errorf("reading the unpacked archive: %v", err)
	}
}

// TestReadRejects: Read notices each kind of damage.
func TestReadRejects(t *testing.T) {
	tests := []struct {
		name    string
		damage  func(t *testing.T, dir string, l *Layout)
		wantErr string
	}{
		{
			name: "a flipped byte in a layer",
			damage: func(t *testing.T, dir string, l *Layout) {
				flipLastByte(t, blob(l, l.Manifest.Layers[1].Digest))
			},
			wantErr: "validating layers: gzip: invalid checksum",
		},
		{
			name: "a layer recompressed to other bytes of the same tar",
			damage: func(t *testing.T, dir string, l *Layout) {
				p := blob(l, l.Manifest.Layers[0].Digest)
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				data[9] = 3 // the gzip header's OS byte: Unix
				if err := os.WriteFile(p, data, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "mismatched layer[0] digest",
		},
		{
			name: "a config that lies about a diff ID, re-hashed",
			damage: func(t *testing.T, dir string, l *Layout) {
				cfg := l.Config.DeepCopy()
				cfg.RootFS.DiffIDs[0] = cfg.RootFS.DiffIDs[1]
				rewriteConfig(t, dir, l, cfg)
			},
			wantErr: "unknown diffID",
		},
		{
			name: "a manifest blob that is not what the index names",
			damage: func(t *testing.T, dir string, l *Layout) {
				p := blob(l, l.Descriptor.Digest)
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, append(data, ' '), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "holds",
		},
		{
			name: "a missing blob",
			damage: func(t *testing.T, dir string, l *Layout) {
				if err := os.Remove(blob(l, l.Manifest.Config.Digest)); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "no such file",
		},
		{
			name: "manifest.json naming another config",
			damage: func(t *testing.T, dir string, l *Layout) {
				writeJSON(t, filepath.Join(dir, "manifest.json"), []dockerManifest{{Config: "blobs/sha256/00", Layers: []string{}}})
			},
			wantErr: "does not match",
		},
		{
			name: "a digest that names a path",
			damage: func(t *testing.T, dir string, l *Layout) {
				p := filepath.Join(dir, "index.json")
				data, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				data = bytes.Replace(data, []byte(l.Descriptor.Digest.String()), []byte("sha256:../../oci-layout"), 1)
				if err := os.WriteFile(p, data, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "non-hex character",
		},
		{
			name: "two manifests",
			damage: func(t *testing.T, dir string, l *Layout) {
				var idx v1.IndexManifest
				readJSON(t, filepath.Join(dir, "index.json"), &idx)
				idx.Manifests = append(idx.Manifests, idx.Manifests[0])
				writeJSON(t, filepath.Join(dir, "index.json"), idx)
			},
			wantErr: "names 2 manifests",
		},
		{
			name: "another layout version",
			damage: func(t *testing.T, dir string, l *Layout) {
				if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"2.0.0"}`), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantErr: "oci-layout",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "layout")
			if _, err := Write(dir, testImage(writeSource(t))); err != nil {
				t.Fatal(err)
			}
			l, err := Read(dir)
			if err != nil {
				t.Fatal(err)
			}
			tt.damage(t, dir, l)
			_, err = Read(dir)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Read of the damaged layout: error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// blob is the file of the blob h in l.
func blob(l *Layout, h v1.Hash) string {
	return filepath.Join(l.Dir, filepath.FromSlash(blobPath(h)))
}

func flipLastByte(t *testing.T, p string) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)-1] ^= 0xff
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readJSON(t *testing.T, p string, v any) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

func writeJSON(t *testing.T, p string, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// writeBlob stores v as a JSON blob of the layout dir and returns its
// descriptor.
func writeBlob(t *testing.T, dir string, mt types.MediaType, v any) v1.Descriptor {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	h, size, err := v1.SHA256(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(blobPath(h))), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return v1.Descriptor{MediaType: mt, Digest: h, Size: size}
}

// rewriteConfig stores cfg as the config blob and points the manifest, the
// index and manifest.json at it, so every digest is right but what cfg says.
func rewriteConfig(t *testing.T, dir string, l *Layout, cfg *v1.ConfigFile) {
	t.Helper()
	m := l.Manifest.DeepCopy()
	m.Config = writeBlob(t, dir, types.OCIConfigJSON, cfg)
	desc := writeBlob(t, dir, types.OCIManifestSchema1, m)
	var idx v1.IndexManifest
	readJSON(t, filepath.Join(dir, "index.json"), &idx)
	idx.Manifests[0].Digest, idx.Manifests[0].Size = desc.Digest, desc.Size
	writeJSON(t, filepath.Join(dir, "index.json"), idx)
	docker := []dockerManifest{{Config: blobPath(m.Config.Digest)}}
	for _, layer := range m.Layers {
		docker[0].Layers = append(docker[0].Layers, blobPath(layer.Digest))
	}
	writeJSON(t, filepath.Join(dir, "manifest.json"), docker)
}

// TestWriteRejects: entries that cannot make a layer, and bad references.
func TestWriteRejects(t *testing.T) {
	tests := []struct {
		name    string
		change  func(img *Image)
		wantErr string
	}{
		{"a relative path", func(img *Image) { img.Layers[0] = append(img.Layers[0], File("etc/group", 0o644, nil)) }, "not absolute"},
		{"one path twice", func(img *Image) { img.Layers[0] = append(img.Layers[0], File("/etc/passwd", 0o600, nil)) }, "given twice"},
		{"a file under a link", func(img *Image) { img.Layers[0] = append(img.Layers[0], File("/lib64/ld.so", 0o755, nil)) }, "not a directory"},
		{"no tag", func(img *Image) { img.Ref = "registry.example:5000/team/app" }, "no tag"},
		{"a device", func(img *Image) {
			img.Layers[0] = append(img.Layers[0], Entry{Path: "/dev/null", Mode: fs.ModeDevice | 0o666})
		}, "unsupported type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img := testImage(writeSource(t))
			tt.change(&img)
			_, err := Write(filepath.Join(t.TempDir(), "layout"), img)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Write: error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestExtract: the extracted tree has the entries' types, modes and (as
// root) owners.
func TestExtract(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	if _, err := Write(dir, testImage(writeSource(t))); err != nil {
		t.Fatal(err)
	}
	l, err := Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	asRoot := os.Geteuid() == 0
	if err := l.Extract(root, asRoot); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		path string
		mode fs.FileMode
		uid  int
	}{
		{"tmp", fs.ModeDir | fs.ModeSticky | 0o777, 0},
		{"home/nonroot", fs.ModeDir | 0o700, 65532},
		{"usr/local/bin/app", 0o755, 0},
		{"lib64", fs.ModeSymlink | 0o777, 0},
	} {
		fi, err := os.Lstat(filepath.Join(root, tt.path))
		if err != nil {
			t.Error(err)
			continue
		}
		if fi.Mode() != tt.mode {
			t.Errorf("%s: mode %v, want %v", tt.path, fi.Mode(), tt.mode)
		}
		if uid := fileUID(fi); asRoot && uid != tt.uid {
			t.Errorf("%s: owner %d, want %d", tt.path, uid, tt.uid)
		}
	}
	if target, err := os.Readlink(filepath.Join(root, "lib64")); err != nil || target != "usr/lib64" {
		t.Errorf("lib64 -> %q (%v), want usr/lib64", target, err)
	}
}

// TestNoSymlinkParents: an entry under a symbolic link (which could point
// out of the tree) is refused.
func TestNoSymlinkParents(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := noSymlinkParents(root, "usr/bin"); err != nil {
		t.Errorf("usr/bin: %v", err)
	}
	if err := noSymlinkParents(root, "escape/etc/passwd"); err == nil {
		t.Error("escape/etc/passwd through a link to /: no error")
	}
}

// fileUID is fi's owner.
func fileUID(fi fs.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// TestUnarchive: Unarchive gives back the layout Archive packed, which
// Read verifies, and refuses entries outside the directory and entries
// other than directories and files.
func TestUnarchive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "layout")
	want, err := Write(dir, testImage(writeSource(t)))
	if err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if err := Archive(&archive, dir); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "unpacked")
	if err := Unarchive(bytes.NewReader(archive.Bytes()), out); err != nil {
		t.Fatal(err)
	}
	l, err := Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, l.Descriptor); diff != "" {
		t.Errorf("the unpacked layout's descriptor (-want +got):\n%s", diff)
	}
	if err := Unarchive(bytes.NewReader(archive.Bytes()), out); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("unpacking into a layout: %v, want a refusal", err)
	}

	tests := []struct {
		name string
		hdr  tar.Header
		want string
	}{
		{name: "a parent's path", hdr: tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}, want: "not a local path"},
		{name: "an absolute path", hdr: tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, want: "not a local path"},
		{name: "a symbolic link", hdr: tar.Header{Name: "blobs", Typeflag: tar.TypeSymlink, Linkname: "/"}, want: "directories and files only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			tw := tar.NewWriter(&b)
			if err := tw.WriteHeader(&tt.hdr); err != nil {
				t.Fatal(err)
			}
			if err := tw.Close(); err != nil {
				t.Fatal(err)
			}
			err := Unarchive(&b, filepath.Join(t.TempDir(), "out"))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Unarchive: %v, want an error saying %q", err, tt.want)
			}
		})
	}
}
