// Package ociimage writes and reads container images in the OCI image layout
// (https://github.com/opencontainers/image-spec/blob/main/image-layout.md)
// with the standard library alone, so that images can be built where no
// container daemon or registry is reachable.
//
// A layout directory holds:
//
//	oci-layout                 {"imageLayoutVersion":"1.0.0"}
//	index.json                 one manifest descriptor, annotated with the image's name
//	manifest.json              the same image for `docker load` before Docker 25
//	blobs/sha256/<hex>         the manifest, the config and the gzip-compressed tar layers
//
// Everything is deterministic: entries are sorted by path, every mtime is
// the Unix epoch, owners are numeric with no user or group names, gzip
// headers carry no name or time and the config has no creation date. The
// same entries and file contents therefore give the same digests on every
// build. Archive packs a layout into one tar (an oci-archive for podman
// load, skopeo copy oci-archive:FILE, or docker load).
//
// Read verifies a layout (every digest and size, each layer's diff ID) and
// Layout.Extract unpacks its layers into a directory, so tests can run what
// an image holds.
package ociimage
