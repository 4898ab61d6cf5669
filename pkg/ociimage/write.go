package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// layoutVersion is the content of the oci-layout file.
const layoutVersion = `{"imageLayoutVersion":"1.0.0"}`

// Image is what Write puts in a layout.
type Image struct {
	// Ref names the image, "REPOSITORY:TAG" (e.g.
	// "ghcr.io/acme/gpushare-device-plugin:v1.2.0"); the tag must be given.
	Ref      string
	Platform Platform
	Config   RuntimeConfig
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

// Write writes img as an OCI image layout into dir, which must be absent or
// empty, and returns the manifest's descriptor.
func Write(dir string, img Image) (Descriptor, error) {
	_, tag, err := splitRef(img.Ref)
	if err != nil {
		return Descriptor{}, err
	}
	if img.Platform.OS == "" || img.Platform.Architecture == "" {
		return Descriptor{}, fmt.Errorf("image %s: the platform needs an OS and an architecture", img.Ref)
	}
	if err := emptyDir(dir); err != nil {
		return Descriptor{}, err
	}
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil { //nolint:gosec // G301: an image layout is world-readable
		return Descriptor{}, fmt.Errorf("creating the blob directory: %w", err)
	}

	cfg := Config{
		Architecture: img.Platform.Architecture,
		OS:           img.Platform.OS,
		Variant:      img.Platform.Variant,
		Config:       img.Config,
		RootFS:       RootFS{Type: "layers", DiffIDs: []string{}},
	}
	manifest := Manifest{SchemaVersion: 2, MediaType: MediaTypeManifest, Layers: []Descriptor{}}
	for i, entries := range img.Layers {
		d, err := writeLayerBlob(blobs, entries)
		if err != nil {
			return Descriptor{}, fmt.Errorf("image %s, layer %d: %w", img.Ref, i, err)
		}
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, d.diffID)
		manifest.Layers = append(manifest.Layers, Descriptor{MediaType: MediaTypeLayerGzip, Digest: d.digest, Size: d.size})
	}
	if manifest.Config, err = writeJSONBlob(blobs, MediaTypeConfig, cfg); err != nil {
		return Descriptor{}, fmt.Errorf("image %s: writing the config: %w", img.Ref, err)
	}
	desc, err := writeJSONBlob(blobs, MediaTypeManifest, manifest)
	if err != nil {
		return Descriptor{}, fmt.Errorf("image %s: writing the manifest: %w", img.Ref, err)
	}
	platform := img.Platform
	desc.Platform = &platform
	desc.Annotations = map[string]string{AnnotationRefName: tag, AnnotationContainerdName: img.Ref}
	index := Index{SchemaVersion: 2, MediaType: MediaTypeIndex, Manifests: []Descriptor{desc}}
	if err := writeJSONFile(filepath.Join(dir, "index.json"), index); err != nil {
		return Descriptor{}, err
	}
	docker := []dockerManifest{{Config: blobPath(manifest.Config.Digest), RepoTags: []string{img.Ref}}}
	for _, l := range manifest.Layers {
		docker[0].Layers = append(docker[0].Layers, blobPath(l.Digest))
	}
	if err := writeJSONFile(filepath.Join(dir, "manifest.json"), docker); err != nil {
		return Descriptor{}, err
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(layoutVersion), 0o644); err != nil { //nolint:gosec // an image layout is world-readable
		return Descriptor{}, fmt.Errorf("writing oci-layout: %w", err)
	}
	return desc, nil
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

// blobPath is a blob's path relative to the layout: "blobs/sha256/<hex>".
func blobPath(digest string) string {
	return "blobs/sha256/" + strings.TrimPrefix(digest, "sha256:")
}

// writeLayerBlob writes one layer into the blob directory under its digest.
func writeLayerBlob(blobs string, entries []Entry) (layerDigests, error) {
	tmp, err := os.CreateTemp(blobs, ".layer-")
	if err != nil {
		return layerDigests{}, fmt.Errorf("creating a layer file: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // fails once renamed
	d, err := writeLayer(tmp, entries)
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing the layer file: %w", cerr)
	}
	if err != nil {
		return layerDigests{}, err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil { //nolint:gosec // G302: an image layout is world-readable
		return layerDigests{}, fmt.Errorf("making the layer readable: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(blobs, strings.TrimPrefix(d.digest, "sha256:"))); err != nil {
		return layerDigests{}, fmt.Errorf("naming the layer by its digest: %w", err)
	}
	return d, nil
}

// writeJSONBlob writes v as a JSON blob and returns its descriptor.
func writeJSONBlob(blobs, mediaType string, v any) (Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return Descriptor{}, fmt.Errorf("encoding %s: %w", mediaType, err)
	}
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(blobs, hexSum), data, 0o644); err != nil { //nolint:gosec // an image layout is world-readable
		return Descriptor{}, fmt.Errorf("writing %s: %w", mediaType, err)
	}
	return Descriptor{MediaType: mediaType, Digest: "sha256:" + hexSum, Size: int64(len(data))}, nil
}

// writeJSONFile writes v as indented JSON to p.
func writeJSONFile(p string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", filepath.Base(p), err)
	}
	if err := os.WriteFile(p, append(data, '\n'), 0o644); err != nil { //nolint:gosec // an image layout is world-readable
		return fmt.Errorf("writing %s: %w", filepath.Base(p), err)
	}
	return nil
}

// Archive writes the layout in dir to w as one uncompressed tar (an
// oci-archive; blobs are compressed already), deterministic like the
// layout itself: sorted names, mtime 0, owner 0:0.
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
