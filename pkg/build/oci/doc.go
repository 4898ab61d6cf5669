// Package oci builds and reads gpushare's container images as OCI
// image layouts (https://github.com/opencontainers/image-spec/blob/main/image-layout.md)
// with github.com/google/go-containerregistry, so that images can be built
// where no container daemon or registry is reachable.
//
// What is ours: the layers' contents (Entry: files, directories and
// symbolic links with numeric owners and no times, sorted, parents added),
// manifest.json beside the layout (for `docker load` before Docker 25),
// the one-file archive of a layout, and a safe extraction for tests.
// go-containerregistry does the rest: compressing and hashing the layers,
// the config, the manifest and index, writing the layout (tarball, mutate,
// layout) and verifying one (validate).
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
// headers carry no name or time and the config's dates are the zero time.
// The same entries and file contents therefore give the same digests on
// every build. Archive packs a layout into one tar (an oci-archive for
// podman load, skopeo copy oci-archive:FILE, or docker load).
package oci
