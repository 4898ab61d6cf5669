package oci

import (
	"archive/tar"
	"compress/gzip"
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
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations set on the index's manifest descriptor.
const (
	// AnnotationRefName is the image's tag; skopeo and podman find an
	// image in a layout by it ("oci-archive:FILE:TAG").
	AnnotationRefName = "org.opencontainers.image.ref.name"
	// AnnotationContainerdName is the full reference under which
	// containerd (ctr import, kind load image-archive) and Docker 25+
	// store a loaded OCI image, normalized as they name images
	// (containerdName).
	AnnotationContainerdName = "io.containerd.image.name"
)

// Image is what Write puts in a layout.
type Image struct {
	// Ref names the image, "REPOSITORY:TAG" (e.g.
	// "ghcr.io/acme/gpushare-device-plugin:v1.2.0"); the tag must be given.
	Ref string
	// Platform is the OS and CPU, in GOOS and GOARCH spelling ("linux",
	// "amd64"); Variant "v8" for arm64.
	Platform v1.Platform
	// Config is what a runtime starts a container with. Keep User
	// numeric ("UID:GID"): kubelet enforces runAsNonRoot only on a
	// numeric user.
	Config v1.Config
	// Layers are applied bottom first; each is a list of entries.
	Layers [][]Entry
}

// splitRef splits "REPOSITORY:TAG" at the tag's colon (a registry port's
// colon comes before the last slash).
func splitRef(ref string) (repo, tag string, err error) {
	i := strings.LastIndex(ref, ":")
	if i <= 0 || i < strings.LastIndex(ref, "/") || i == len(ref)-1 {
		return "", "", fmt.Errorf("image reference %q has no tag (want REPOSITORY:TAG)", ref)
	}
	return ref[:i], ref[i+1:], nil
}

// containerdName is ref as containerd and Docker name a stored image: a
// name without a registry is Docker Hub's, docker.io, and one without a
// path is under library/ there. kubelet asks the runtime for a pod's
// "gpushare-device-plugin:v1" as "docker.io/library/gpushare-device-plugin:v1",
// so an archive imported with ctr (which takes this annotation as it is)
// must carry that form.
func containerdName(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	switch {
	case !found:
		return "docker.io/library/" + ref
	case strings.ContainsAny(first, ".:") || first == "localhost":
		return ref
	default:
		return "docker.io/" + ref
	}
}

// Build makes img an image with OCI media types: one gzip layer per list
// of entries and a config whose dates are the zero time.
func Build(img Image) (v1.Image, error) {
	if img.Platform.OS == "" || img.Platform.Architecture == "" {
		return nil, fmt.Errorf("image %s: the platform needs an OS and an architecture", img.Ref)
	}
	layers := make([]v1.Layer, 0, len(img.Layers))
	for i, entries := range img.Layers {
		entries, err := normalize(entries)
		if err != nil {
			return nil, fmt.Errorf("image %s, layer %d: %w", img.Ref, i, err)
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return tarStream(entries) },
			tarball.WithCompressionLevel(gzip.DefaultCompression), tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return nil, fmt.Errorf("image %s, layer %d: %w", img.Ref, i, err)
		}
		layers = append(layers, l)
	}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	base, err := mutate.ConfigFile(base, &v1.ConfigFile{
		Architecture: img.Platform.Architecture,
		OS:           img.Platform.OS,
		Variant:      img.Platform.Variant,
		Config:       img.Config,
		RootFS:       v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, fmt.Errorf("image %s: setting the config: %w", img.Ref, err)
	}
	out, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		return nil, fmt.Errorf("image %s: adding the layers: %w", img.Ref, err)
	}
	return out, nil
}

// Write writes img as an OCI image layout into dir, which must be absent or
// empty, and returns the manifest's descriptor as index.json holds it.
func Write(dir string, img Image) (v1.Descriptor, error) {
	_, tag, err := splitRef(img.Ref)
	if err != nil {
		return v1.Descriptor{}, err
	}
	image, err := Build(img)
	if err != nil {
		return v1.Descriptor{}, err
	}
	if err := emptyDir(dir); err != nil {
		return v1.Descriptor{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("image %s: starting the layout: %w", img.Ref, err)
	}
	if err := p.WriteImage(image); err != nil {
		return v1.Descriptor{}, fmt.Errorf("image %s: writing the blobs: %w", img.Ref, err)
	}
	desc, err := partial.Descriptor(image)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("image %s: describing the manifest: %w", img.Ref, err)
	}
	// An image, not an artifact: go-containerregistry would fill
	// artifactType with the config's media type, which OCI keeps for
	// artifacts.
	desc.ArtifactType = ""
	desc.Annotations = map[string]string{AnnotationRefName: tag, AnnotationContainerdName: containerdName(img.Ref)}
	platform := img.Platform
	desc.Platform = &platform
	if err := p.AppendDescriptor(*desc); err != nil {
		return v1.Descriptor{}, fmt.Errorf("image %s: writing the index: %w", img.Ref, err)
	}
	if err := writeDockerManifest(dir, image, img.Ref); err != nil {
		return v1.Descriptor{}, fmt.Errorf("image %s: %w", img.Ref, err)
	}
	return *desc, nil
}

// dockerManifest is one element of manifest.json, the docker-archive index
// that `docker load` reads when it predates OCI support (Docker < 25).
type dockerManifest struct {
	Config   string   `json:"Config"`
	RepoTags []string `json:"RepoTags"`
	Layers   []string `json:"Layers"`
}

// dockerManifestOf is manifest.json's entry for an image of the layout.
func dockerManifestOf(image v1.Image, ref string) (dockerManifest, error) {
	m, err := image.Manifest()
	if err != nil {
		return dockerManifest{}, fmt.Errorf("reading the manifest: %w", err)
	}
	d := dockerManifest{Config: blobPath(m.Config.Digest), RepoTags: []string{ref}, Layers: []string{}}
	for _, l := range m.Layers {
		d.Layers = append(d.Layers, blobPath(l.Digest))
	}
	return d, nil
}

// writeDockerManifest writes manifest.json for image into the layout dir.
func writeDockerManifest(dir string, image v1.Image, ref string) error {
	d, err := dockerManifestOf(image, ref)
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent([]dockerManifest{d}, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding manifest.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), append(data, '\n'), 0o644); err != nil { //nolint:gosec // an image layout is world-readable
		return fmt.Errorf("writing manifest.json: %w", err)
	}
	return nil
}

// blobPath is a blob's path relative to the layout: "blobs/sha256/<hex>".
func blobPath(h v1.Hash) string {
	return "blobs/" + h.Algorithm + "/" + h.Hex
}

// emptyDir creates dir, or checks that it exists and is empty.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // G301: an image layout is world-readable
			return fmt.Errorf("creating the layout directory: %w", err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("reading the layout directory: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("layout directory %s is not empty", dir)
	}
	return nil
}

// Archive writes the layout in dir to w as one uncompressed tar (an
// oci-archive; blobs are compressed already), deterministic like the
// layout itself: sorted names, mtime 0, owner 0:0, files 0644.
func Archive(w io.Writer, dir string) error {
	var files []string // slash-separated paths relative to dir
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%s is neither a file nor a directory", p)
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing layout %s: %w", dir, err)
	}
	slices.Sort(files)
	tw := tar.NewWriter(w)
	for _, rel := range files {
		if err := archiveFile(tw, dir, rel); err != nil {
			return fmt.Errorf("archiving %s: %w", rel, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("closing the archive: %w", err)
	}
	return nil
}

// archiveFile writes dir/rel into tw.
func archiveFile(tw *tar.Writer, dir, rel string) error {
	p := filepath.Join(dir, filepath.FromSlash(rel))
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	hdr := &tar.Header{Name: rel, Mode: 0o644, ModTime: epoch, Typeflag: tar.TypeReg, Size: fi.Size()}
	if fi.IsDir() {
		hdr.Name, hdr.Mode, hdr.Typeflag, hdr.Size = rel+"/", 0o755, tar.TypeDir, 0
		return tw.WriteHeader(hdr)
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	_, err = io.Copy(tw, f)
	return err
}

// Unarchive unpacks an archive Archive wrote (a layout in one tar) into
// dir, which must be absent or empty. Only directories and regular files
// at local paths are taken; anything else is an error. The layout is not
// verified here: Read does that.
func Unarchive(r io.Reader, dir string) error {
	if err := emptyDir(dir); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		name := path.Clean(hdr.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("archive entry %q is not a local path", hdr.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil { //nolint:gosec // G301: an image layout is world-readable
				return fmt.Errorf("unpacking %s: %w", hdr.Name, err)
			}
		case tar.TypeReg:
			// No entry makes a link, so no parent can lead outside dir.
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil { //nolint:gosec // G301: as above
				return fmt.Errorf("unpacking %s: %w", hdr.Name, err)
			}
			if err := writeFile(p, tr); err != nil {
				return fmt.Errorf("unpacking %s: %w", hdr.Name, err)
			}
		default:
			return fmt.Errorf("archive entry %q is of type %q: a layout archive holds directories and files only", hdr.Name, hdr.Typeflag)
		}
	}
}
