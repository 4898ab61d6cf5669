package ociimage

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Layout is a verified single-image layout, as Read returns it.
type Layout struct {
	// Dir is the layout's directory.
	Dir      string
	Index    Index
	Manifest Manifest
	Config   Config
}

// Read reads the single-image layout in dir and verifies it: oci-layout's
// version, index.json naming one manifest, the size and sha256 of every
// blob it reaches, each layer's uncompressed digest against the config's
// diff ID, and manifest.json naming the same config and layers.
func Read(dir string) (*Layout, error) {
	l := &Layout{Dir: dir}
	data, err := os.ReadFile(filepath.Join(dir, "oci-layout"))
	if err != nil {
		return nil, fmt.Errorf("reading oci-layout: %w", err)
	}
	var version struct {
		ImageLayoutVersion string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(data, &version); err != nil {
		return nil, fmt.Errorf("decoding oci-layout: %w", err)
	}
	if version.ImageLayoutVersion != "1.0.0" {
		return nil, fmt.Errorf("oci-layout is %q, want %s", data, layoutVersion)
	}
	if err := readJSON(filepath.Join(dir, "index.json"), &l.Index); err != nil {
		return nil, err
	}
	if l.Index.SchemaVersion != 2 || l.Index.MediaType != MediaTypeIndex || len(l.Index.Manifests) != 1 {
		return nil, fmt.Errorf("index.json: want schema 2, %s and one manifest; got schema %d, %q, %d manifests",
			MediaTypeIndex, l.Index.SchemaVersion, l.Index.MediaType, len(l.Index.Manifests))
	}
	if err := l.readBlobJSON(l.Index.Manifests[0], MediaTypeManifest, &l.Manifest); err != nil {
		return nil, err
	}
	if l.Manifest.SchemaVersion != 2 || l.Manifest.MediaType != MediaTypeManifest {
		return nil, fmt.Errorf("manifest: want schema 2 and %s, got %d and %q", MediaTypeManifest, l.Manifest.SchemaVersion, l.Manifest.MediaType)
	}
	if err := l.readBlobJSON(l.Manifest.Config, MediaTypeConfig, &l.Config); err != nil {
		return nil, err
	}
	if l.Config.RootFS.Type != "layers" || len(l.Config.RootFS.DiffIDs) != len(l.Manifest.Layers) {
		return nil, fmt.Errorf("config: rootfs %q lists %d diff IDs for %d layers", l.Config.RootFS.Type, len(l.Config.RootFS.DiffIDs), len(l.Manifest.Layers))
	}
	for i, layer := range l.Manifest.Layers {
		if err := l.verifyLayer(layer, l.Config.RootFS.DiffIDs[i]); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	if err := l.verifyDockerManifest(); err != nil {
		return nil, err
	}
	return l, nil
}

// readJSON decodes the JSON file p into v.
func readJSON(p string, v any) error {
	data, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("reading %s: %w", filepath.Base(p), err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding %s: %w", filepath.Base(p), err)
	}
	return nil
}

// blobFile is the path of the blob d points at, after checking the digest's
// form (so that it cannot name a path outside the blob directory).
func (l *Layout) blobFile(d Descriptor) (string, error) {
	hexSum, ok := strings.CutPrefix(d.Digest, "sha256:")
	if !ok || len(hexSum) != sha256.Size*2 || strings.ToLower(hexSum) != hexSum {
		return "", fmt.Errorf("digest %q is not sha256:<64 lower-case hex digits>", d.Digest)
	}
	if _, err := hex.DecodeString(hexSum); err != nil {
		return "", fmt.Errorf("digest %q: %w", d.Digest, err)
	}
	return filepath.Join(l.Dir, "blobs", "sha256", hexSum), nil
}

// readBlobJSON reads the blob d points at, verifies its media type, size
// and digest, and decodes it into v.
func (l *Layout) readBlobJSON(d Descriptor, mediaType string, v any) error {
	if d.MediaType != mediaType {
		return fmt.Errorf("blob %s: media type %q, want %q", d.Digest, d.MediaType, mediaType)
	}
	p, err := l.blobFile(d)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("reading %s: %w", mediaType, err)
	}
	sum := sha256.Sum256(data)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != d.Digest || int64(len(data)) != d.Size {
		return fmt.Errorf("blob %s (%d bytes) holds %d bytes with digest %s", d.Digest, d.Size, len(data), got)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("decoding %s %s: %w", mediaType, d.Digest, err)
	}
	return nil
}

// verifyLayer checks the layer blob's size and digest first (so that damage
// is reported as such, not as a gzip error), then the digest of its
// uncompressed tar against diffID.
func (l *Layout) verifyLayer(d Descriptor, diffID string) error {
	if d.MediaType != MediaTypeLayerGzip {
		return fmt.Errorf("blob %s: media type %q, want %q", d.Digest, d.MediaType, MediaTypeLayerGzip)
	}
	p, err := l.blobFile(d)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("opening the layer: %w", err)
	}
	defer func() { _ = f.Close() }()
	compressed := sha256.New()
	n, err := io.Copy(compressed, f)
	if err != nil {
		return fmt.Errorf("reading layer %s: %w", d.Digest, err)
	}
	if got := "sha256:" + hex.EncodeToString(compressed.Sum(nil)); got != d.Digest || n != d.Size {
		return fmt.Errorf("blob %s (%d bytes) holds %d bytes with digest %s", d.Digest, d.Size, n, got)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("rereading layer %s: %w", d.Digest, err)
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("layer %s: %w", d.Digest, err)
	}
	uncompressed := sha256.New()
	if _, err := io.Copy(uncompressed, zr); err != nil { //nolint:gosec // the blob's digest is verified above
		return fmt.Errorf("decompressing layer %s: %w", d.Digest, err)
	}
	if got := "sha256:" + hex.EncodeToString(uncompressed.Sum(nil)); got != diffID {
		return fmt.Errorf("layer %s uncompresses to %s, but the config's diff ID is %s", d.Digest, got, diffID)
	}
	return nil
}

// verifyDockerManifest checks that manifest.json names the same config and
// layers as the OCI manifest.
func (l *Layout) verifyDockerManifest() error {
	var docker []dockerManifest
	if err := readJSON(filepath.Join(l.Dir, "manifest.json"), &docker); err != nil {
		return err
	}
	if len(docker) != 1 || docker[0].Config != blobPath(l.Manifest.Config.Digest) || len(docker[0].Layers) != len(l.Manifest.Layers) {
		return fmt.Errorf("manifest.json %+v does not match the OCI manifest", docker)
	}
	for i, layer := range l.Manifest.Layers {
		if docker[0].Layers[i] != blobPath(layer.Digest) {
			return fmt.Errorf("manifest.json layer %d is %s, the OCI manifest's %s", i, docker[0].Layers[i], layer.Digest)
		}
	}
	return nil
}

// Walk calls fn for every entry of every layer, bottom layer first; r reads
// a regular file's contents.
func (l *Layout) Walk(fn func(layer int, hdr *tar.Header, r io.Reader) error) error {
	for i, d := range l.Manifest.Layers {
		if err := l.walkLayer(i, d, fn); err != nil {
			return err
		}
	}
	return nil
}

// walkLayer calls fn for every entry of layer i.
func (l *Layout) walkLayer(i int, d Descriptor, fn func(layer int, hdr *tar.Header, r io.Reader) error) error {
	p, err := l.blobFile(d)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("opening layer %d: %w", i, err)
	}
	defer func() { _ = f.Close() }()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("layer %d: %w", i, err)
	}
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading layer %d: %w", i, err)
		}
		if err := fn(i, hdr, tr); err != nil {
			return fmt.Errorf("layer %d, %s: %w", i, hdr.Name, err)
		}
	}
}

// Extract unpacks the layers into dest (created if absent; made 0755 like
// a container's root, so that any user can reach its files), bottom first,
// as a container runtime would: files, directories and symbolic links with
// their modes, and, when chown is true (it needs root), their owners.
// Entries must name local paths; no entry may be written through a
// symbolic link, so nothing lands outside dest. Whiteouts and hard links
// are refused (Write never makes them).
func (l *Layout) Extract(dest string, chown bool) error {
	if err := os.MkdirAll(dest, 0o755); err != nil { //nolint:gosec // G301: a root filesystem others must traverse
		return fmt.Errorf("creating %s: %w", dest, err)
	}
	if err := os.Chmod(dest, 0o755); err != nil { //nolint:gosec // G302: as above
		return fmt.Errorf("opening %s to the image's users: %w", dest, err)
	}
	return l.Walk(func(_ int, hdr *tar.Header, r io.Reader) error {
		name := path.Clean(hdr.Name)
		if !filepath.IsLocal(name) || name == "." {
			return fmt.Errorf("entry %q is not a local path", hdr.Name)
		}
		if strings.HasPrefix(path.Base(name), ".wh.") {
			return fmt.Errorf("whiteout %q: not supported", hdr.Name)
		}
		if err := noSymlinkParents(dest, name); err != nil {
			return err
		}
		p := filepath.Join(dest, filepath.FromSlash(name))
		mode := hdr.FileInfo().Mode()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		case tar.TypeReg:
			if err := removeNonDir(p); err != nil {
				return err
			}
			if err := writeFile(p, r); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := removeNonDir(p); err != nil {
				return err
			}
			if err := os.Symlink(hdr.Linkname, p); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry type %q: not supported", hdr.Typeflag)
		}
		if chown {
			if err := os.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
				return err
			}
		}
		if hdr.Typeflag != tar.TypeSymlink {
			return os.Chmod(p, mode.Perm()|mode&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
		}
		return nil
	})
}

// noSymlinkParents fails if a directory on the way from dest to name is a
// symbolic link or not a directory.
func noSymlinkParents(dest, name string) error {
	dir := path.Dir(name)
	if dir == "." {
		return nil
	}
	p := dest
	for _, part := range strings.Split(dir, "/") {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("entry %s: its parent: %w", name, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("entry %s: its parent %s is %v, not a directory", name, p, fi.Mode().Type())
		}
	}
	return nil
}

// removeNonDir removes what p holds unless it is a directory.
func removeNonDir(p string) error {
	fi, err := os.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s is a directory", p)
	}
	return os.Remove(p)
}

// writeFile creates p (which must not exist) with r's contents.
func writeFile(p string, r io.Reader) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, r) //nolint:gosec // extracts our own, verified layers
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
