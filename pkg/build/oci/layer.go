package oci

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"
)

// epoch is every entry's mtime, so a layer's digest depends on its contents
// only.
var epoch = time.Unix(0, 0).UTC()

// Entry is one file, directory or symbolic link of a layer.
type Entry struct {
	// Path is absolute in the image: "/usr/local/bin/gpushare-device-plugin".
	Path string
	// Mode is the type (0, fs.ModeDir or fs.ModeSymlink) and the
	// permission bits, with fs.ModeSticky, fs.ModeSetuid or fs.ModeSetgid
	// where wanted (e.g. fs.ModeDir|fs.ModeSticky|0o777 for /tmp).
	Mode fs.FileMode
	// UID and GID own the entry (numeric; layers carry no names).
	UID, GID int
	// Linkname is a symbolic link's target, as the link holds it.
	Linkname string
	// Source is the host file a regular file's contents are read from;
	// when empty, Data is the contents.
	Source string
	Data   []byte
}

// File returns a regular file entry holding data, owned by root.
func File(p string, perm fs.FileMode, data []byte) Entry {
	return Entry{Path: p, Mode: perm, Data: data}
}

// Dir returns a directory entry owned by root.
func Dir(p string, perm fs.FileMode) Entry {
	return Entry{Path: p, Mode: fs.ModeDir | perm}
}

// Symlink returns a symbolic link at p pointing at target.
func Symlink(p, target string) Entry {
	return Entry{Path: p, Mode: fs.ModeSymlink | 0o777, Linkname: target}
}

// normalize cleans the entries' paths, adds every missing parent directory
// (0755, root) and sorts by path, so that parents come before children and
// the order does not depend on the caller's. Two entries at one path are
// an error unless they are the same directory.
func normalize(entries []Entry) ([]Entry, error) {
	byPath := make(map[string]Entry, len(entries)) // cleaned path -> entry
	for _, e := range entries {
		if !path.IsAbs(e.Path) {
			return nil, fmt.Errorf("layer entry %q: the path is not absolute", e.Path)
		}
		e.Path = path.Clean(e.Path)
		if e.Path == "/" {
			return nil, fmt.Errorf("layer entry %q: the root is implicit", e.Path)
		}
		typ := e.Mode.Type()
		if typ != 0 && typ != fs.ModeDir && typ != fs.ModeSymlink {
			return nil, fmt.Errorf("layer entry %s: unsupported type %v (files, directories and symbolic links only)", e.Path, typ)
		}
		if old, ok := byPath[e.Path]; ok {
			if old.Mode == e.Mode && old.UID == e.UID && old.GID == e.GID && typ == fs.ModeDir {
				continue
			}
			return nil, fmt.Errorf("layer entry %s: given twice (modes %v and %v)", e.Path, old.Mode, e.Mode)
		}
		byPath[e.Path] = e
	}
	for p := range byPath {
		for dir := path.Dir(p); dir != "/"; dir = path.Dir(dir) {
			if e, ok := byPath[dir]; ok {
				if !e.Mode.IsDir() {
					return nil, fmt.Errorf("layer entry %s: its parent %s is not a directory (%v)", p, dir, e.Mode)
				}
				continue
			}
			byPath[dir] = Dir(dir, 0o755)
		}
	}
	out := make([]Entry, 0, len(byPath))
	for _, e := range byPath {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// tarMode is the tar header's mode word for m: permission bits plus the
// setuid, setgid and sticky bits in their Unix positions.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}

// tarStream streams entries, normalized already, as an uncompressed tar:
// the opener of a layer, called again each time go-containerregistry reads
// it (to hash, to compress, to write), so nothing is held in memory.
func tarStream(entries []Entry) (io.ReadCloser, error) {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for _, e := range entries {
			if err := writeEntry(tw, e); err != nil {
				pw.CloseWithError(fmt.Errorf("writing layer entry %s: %w", e.Path, err))
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	return pr, nil
}

// writeEntry writes one header and, for a file, its contents.
func writeEntry(tw *tar.Writer, e Entry) error {
	hdr := &tar.Header{
		Name:    strings.TrimPrefix(e.Path, "/"),
		Mode:    tarMode(e.Mode),
		Uid:     e.UID,
		Gid:     e.GID,
		ModTime: epoch,
	}
	switch e.Mode.Type() {
	case fs.ModeDir:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
		return tw.WriteHeader(hdr)
	case fs.ModeSymlink:
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = e.Linkname
		return tw.WriteHeader(hdr)
	}
	hdr.Typeflag = tar.TypeReg
	if e.Source == "" {
		hdr.Size = int64(len(e.Data))
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(e.Data)
		return err
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("source %s is not a regular file (%v)", e.Source, fi.Mode())
	}
	hdr.Size = fi.Size()
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, f)
	if err != nil {
		return err
	}
	if n != hdr.Size {
		return fmt.Errorf("source %s changed size while being read (%d bytes, then %d)", e.Source, hdr.Size, n)
	}
	return nil
}
