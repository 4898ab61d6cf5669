package oci

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// Layout is a verified single-image layout, as Read returns it.
type Layout struct {
	// Dir is the layout's directory.
	Dir string
	// Descriptor is index.json's one manifest descriptor.
	Descriptor v1.Descriptor
	// Image is the image it names.
	Image    v1.Image
	Manifest *v1.Manifest
	Config   *v1.ConfigFile
}

// Read reads the single-image layout in dir and verifies it: oci-layout's
// version, index.json naming one manifest whose blob has the descriptor's
// digest and size, every blob the manifest reaches (go-containerregistry's
// validate: digests, sizes, each layer's diff ID), and manifest.json naming
// the same config and layers.
func Read(dir string) (*Layout, error) {
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
		return nil, fmt.Errorf("oci-layout is %q, want version 1.0.0", data)
	}
	index, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading index.json: %w", err)
	}
	im, err := index.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading index.json: %w", err)
	}
	if len(im.Manifests) != 1 {
		return nil, fmt.Errorf("index.json names %d manifests, want one", len(im.Manifests))
	}
	l := &Layout{Dir: dir, Descriptor: im.Manifests[0]}
	if l.Image, err = index.Image(l.Descriptor.Digest); err != nil {
		return nil, fmt.Errorf("reading image %s: %w", l.Descriptor.Digest, err)
	}
	raw, err := l.Image.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", l.Descriptor.Digest, err)
	}
	got, size, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("hashing manifest %s: %w", l.Descriptor.Digest, err)
	}
	if got != l.Descriptor.Digest || size != l.Descriptor.Size {
		return nil, fmt.Errorf("blob %s (%d bytes) holds %d bytes with digest %s", l.Descriptor.Digest, l.Descriptor.Size, size, got)
	}
	if err := validate.Image(l.Image); err != nil {
		return nil, fmt.Errorf("verifying image %s: %w", l.Descriptor.Digest, err)
	}
	if l.Manifest, err = l.Image.Manifest(); err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", l.Descriptor.Digest, err)
	}
	if l.Config, err = l.Image.ConfigFile(); err != nil {
		return nil, fmt.Errorf("reading the config: %w", err)
	}
	if err := l.verifyDockerManifest(); err != nil {
		return nil, err
	}
	return l, nil
}

// verifyDockerManifest checks that manifest.json names the same config and
// layers as the OCI manifest.
func (l *Layout) verifyDockerManifest() error {
	data, err := os.ReadFile(filepath.Join(l.Dir, "manifest.json"))
	if err != nil {
		return fmt.Errorf("reading manifest.json: %w", err)
	}
	var docker []dockerManifest
	if err := json.Unmarshal(data, &docker); err != nil {
		return fmt.Errorf("decoding manifest.json: %w", err)
	}
	want, err := dockerManifestOf(l.Image, "")
	if err != nil {
		return err
	}
	if len(docker) != 1 || docker[0].Config != want.Config || !slices.Equal(docker[0].Layers, want.Layers) {
		return fmt.Errorf("manifest.json %+v does not match the OCI manifest (config %s, layers %v)", docker, want.Config, want.Layers)
	}
	return nil
}

// Walk calls fn for every entry of every layer, bottom layer first; r reads
// a regular file's contents.
func (l *Layout) Walk(fn func(layer int, hdr *tar.Header, r io.Reader) error) error {
	layers, err := l.Image.Layers()
	if err != nil {
		return fmt.Errorf("listing the layers: %w", err)
	}
	for i, layer := range layers {
		if err := walkLayer(i, layer, fn); err != nil {
			return err
		}
	}
	return nil
}

// walkLayer calls fn for every entry of layer i.
func walkLayer(i int, layer v1.Layer, fn func(layer int, hdr *tar.Header, r io.Reader) error) error {
	rc, err := layer.Uncompressed()
	if err != nil {
		return fmt.Errorf("opening layer %d: %w", i, err)
	}
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
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
