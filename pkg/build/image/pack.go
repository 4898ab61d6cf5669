package image

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpushare/gpushare/pkg/build/oci"
)

// passwd and group name root and distroless's nonroot (65532), with no
// login shell: the images have none. "x": no password, as in any passwd.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n" //nolint:gosec // G101: user entries, no credentials
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// debianVersion marks a Debian-like userland. libnvidia-container (the
// NVIDIA runtime's legacy mode) mounts the driver's libraries into
// /usr/lib/<triplet> when the container has this file, else into
// /usr/lib64; so the device plugin image carries the build host's copy
// exactly when its glibc came from a multiarch (Debian-like) host, and the
// injected libnvidia-ml.so.1 lands beside that glibc, where the loader
// looks without an ld.so.cache.
const debianVersion = "/etc/debian_version"

// baseEntries are every image's skeleton: the users, /tmp and the users'
// home directories.
func baseEntries() []oci.Entry {
	return []oci.Entry{
		oci.File("/etc/passwd", 0o644, []byte(passwd)),
		oci.File("/etc/group", 0o644, []byte(group)),
		{Path: "/tmp", Mode: fs.ModeDir | fs.ModeSticky | 0o777},
		oci.Dir("/root", 0o700),
		{Path: "/home/nonroot", Mode: fs.ModeDir | 0o700, UID: 65532, GID: 65532},
	}
}

// PackOptions say how Pack names and stamps an image and where it goes.
type PackOptions struct {
	// Version tags the image and fills its version label.
	Version string
	// Revision fills the revision label (the commit).
	Revision string
	// Prefix comes before the name in the reference, e.g. "ghcr.io/acme/".
	Prefix string
	// Out is the output directory: Pack writes Out/NAME/ (an OCI layout)
	// and Out/NAME.tar (the same as one archive), replacing both.
	Out string
	// LibraryDirs, when set, replaces the directories searched for the
	// shared libraries of a dynamically linked binary (libraryDirs).
	LibraryDirs []string
	// Sysroot holds the C library of a dynamically linked binary built
	// for another machine than the build host's, laid out as Debian's
	// cross packages lay it out (its loader and libraries in Sysroot/lib);
	// empty: /usr/<the machine's triplet>, e.g. /usr/aarch64-linux-gnu
	// from libc6-arm64-cross, which gcc-aarch64-linux-gnu installs.
	Sysroot string
}

// Result describes one packed image.
type Result struct {
	Ref string
	// Layout and Archive are the paths Pack wrote.
	Layout, Archive string
	// Manifest is the manifest's descriptor; its digest is the image's.
	Manifest v1.Descriptor
	// ArchiveSize is the archive's size in bytes (about what a registry
	// stores: the layers are compressed).
	ArchiveSize int64
	// Libraries are the host files copied for a dynamically linked binary.
	Libraries []string
}

// Pack packs the binary built for r into an image: a first layer with the
// skeleton (and, for a dynamically linked binary, its loader and shared
// libraries from the build host) and a second with the binary alone, so
// images with the same skeleton share their first layer.
func Pack(r Recipe, binary string, opts PackOptions) (Result, error) {
	ref, err := r.Ref(opts.Prefix, opts.Version)
	if err != nil {
		return Result{}, err
	}
	info, err := inspectBinary(binary)
	if err != nil {
		return Result{}, err
	}
	if !r.CGO && !info.static() {
		return Result{}, fmt.Errorf("%s is linked dynamically (loader %q, libraries %v), but its image has no libc: build it with CGO_ENABLED=0", binary, info.interp, info.needed)
	}
	res := Result{
		Ref:     ref,
		Layout:  filepath.Join(opts.Out, r.Name),
		Archive: filepath.Join(opts.Out, r.Name+".tar"),
	}
	base := baseEntries()
	switch {
	case info.static():
	case info.machine != hostMachine():
		var entries []oci.Entry
		if entries, res.Libraries, err = crossLibraries(info, opts.Sysroot); err != nil {
			return Result{}, fmt.Errorf("collecting what %s needs to run: %w", binary, err)
		}
		base = append(base, entries...)
		if _, err := os.Stat(debianVersion); err == nil {
			base = append(base, oci.Entry{Path: debianVersion, Mode: 0o644, Source: debianVersion})
		}
	default:
		lf := libraryFinder{dirs: opts.LibraryDirs}
		if lf.dirs == nil {
			lf.dirs = libraryDirs(info.machine)
		}
		if res.Libraries, err = lf.libraries(info); err != nil {
			return Result{}, fmt.Errorf("collecting what %s needs to run: %w", binary, err)
		}
		files := slices.Clone(res.Libraries)
		if _, err := os.Stat(debianVersion); err == nil {
			files = append(files, debianVersion)
		}
		for _, f := range files {
			entries, err := hostFile(f)
			if err != nil {
				return Result{}, err
			}
			base = append(base, entries...)
		}
		if base, err = dedupe(base); err != nil {
			return Result{}, err
		}
	}
	img := oci.Image{
		Ref:      ref,
		Platform: info.platform,
		Config:   r.RuntimeConfig(opts.Version, opts.Revision),
		Layers: [][]oci.Entry{
			base,
			{{Path: r.Binary(), Mode: 0o755, Source: binary}},
		},
	}
	if err := os.RemoveAll(res.Layout); err != nil {
		return Result{}, fmt.Errorf("removing the old layout: %w", err)
	}
	if res.Manifest, err = oci.Write(res.Layout, img); err != nil {
		return Result{}, err
	}
	if res.ArchiveSize, err = writeArchive(res.Archive, res.Layout); err != nil {
		return Result{}, err
	}
	return res, nil
}

// dedupe drops repeated entries (the same directory or link reached from
// two libraries) and fails on two different entries at one path.
func dedupe(entries []oci.Entry) ([]oci.Entry, error) {
	byPath := map[string]oci.Entry{} // image path -> first entry there
	var out []oci.Entry
	for _, e := range entries {
		old, ok := byPath[e.Path]
		if !ok {
			byPath[e.Path] = e
			out = append(out, e)
			continue
		}
		if old.Mode != e.Mode || old.UID != e.UID || old.GID != e.GID || old.Linkname != e.Linkname || old.Source != e.Source || !bytes.Equal(old.Data, e.Data) {
			return nil, fmt.Errorf("two different entries at %s (%v and %v)", e.Path, old.Mode, e.Mode)
		}
	}
	return out, nil
}

// writeArchive writes the layout in dir as an archive at p and returns its
// size in bytes.
func writeArchive(p, dir string) (size int64, err error) {
	f, err := os.Create(p) //nolint:gosec // the output path is the caller's
	if err != nil {
		return 0, fmt.Errorf("creating the archive: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("closing the archive: %w", cerr)
		}
	}()
	if err := oci.Archive(f, dir); err != nil {
		return 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("sizing the archive: %w", err)
	}
	return fi.Size(), nil
}

// describe is one summary line for a packed image.
func (res Result) describe() string {
	s := fmt.Sprintf("%s  %s  %.1f MiB  %s", res.Ref, res.Manifest.Digest, float64(res.ArchiveSize)/(1<<20), res.Archive)
	if len(res.Libraries) > 0 {
		s += "  (with " + strings.Join(res.Libraries, ", ") + " from the build host)"
	}
	return s
}
