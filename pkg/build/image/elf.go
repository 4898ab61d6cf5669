package image

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpushare/gpushare/pkg/build/oci"
)

// elfPlatforms maps an ELF machine to the OCI platform it runs on.
var elfPlatforms = map[elf.Machine]v1.Platform{
	elf.EM_X86_64:  {OS: "linux", Architecture: "amd64"},
	elf.EM_AARCH64: {OS: "linux", Architecture: "arm64", Variant: "v8"},
	elf.EM_PPC64:   {OS: "linux", Architecture: "ppc64le"},
	elf.EM_S390:    {OS: "linux", Architecture: "s390x"},
	elf.EM_RISCV:   {OS: "linux", Architecture: "riscv64"},
}

// multiarch is each machine's Debian multiarch directory name
// (/usr/lib/<triplet>), where the loader looks by default.
var multiarch = map[elf.Machine]string{
	elf.EM_X86_64:  "x86_64-linux-gnu",
	elf.EM_AARCH64: "aarch64-linux-gnu",
	elf.EM_PPC64:   "powerpc64le-linux-gnu",
	elf.EM_S390:    "s390x-linux-gnu",
	elf.EM_RISCV:   "riscv64-linux-gnu",
}

// binaryInfo is what packing needs to know of a binary.
type binaryInfo struct {
	platform v1.Platform
	// interp is the dynamic loader's path (PT_INTERP); empty when static.
	interp string
	// needed are the DT_NEEDED sonames, e.g. "libc.so.6".
	needed []string
	// machine and class must match in every library loaded with it.
	machine elf.Machine
	class   elf.Class
}

// static reports whether the binary runs with no loader and no libraries.
func (b binaryInfo) static() bool { return b.interp == "" && len(b.needed) == 0 }

// inspectBinary reads the ELF headers of the Linux binary at p.
func inspectBinary(p string) (binaryInfo, error) {
	f, err := elf.Open(p)
	if err != nil {
		return binaryInfo{}, fmt.Errorf("reading the ELF headers of %s (the Go-native builder packs Linux binaries only): %w", p, err)
	}
	defer func() { _ = f.Close() }()
	platform, ok := elfPlatforms[f.Machine]
	if !ok || f.Class != elf.ELFCLASS64 || f.Data != elf.ELFDATA2LSB && f.Machine != elf.EM_S390 {
		return binaryInfo{}, fmt.Errorf("%s is for %v %v %v, which the Go-native builder does not know", p, f.Machine, f.Class, f.Data)
	}
	info := binaryInfo{platform: platform, machine: f.Machine, class: f.Class}
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		data := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(data, 0); err != nil {
			return binaryInfo{}, fmt.Errorf("reading the interpreter of %s: %w", p, err)
		}
		info.interp = strings.TrimRight(string(data), "\x00")
	}
	if info.needed, err = f.ImportedLibraries(); err != nil && !errors.Is(err, elf.ErrNoSymbols) {
		return binaryInfo{}, fmt.Errorf("reading the libraries %s needs: %w", p, err)
	}
	return info, nil
}

// libraryFinder finds shared libraries by soname the way the dynamic
// loader does when there is no ld.so.cache: in each directory of dirs, in
// order.
type libraryFinder struct {
	// dirs are searched in order: ld.so.conf's directories, then the
	// loader's built-in ones (libraryDirs).
	dirs []string
}

// libraryDirs are the directories the build host's loader searches:
// those of /etc/ld.so.conf (and its includes), then the multiarch and
// traditional system directories.
func libraryDirs(m elf.Machine) []string {
	var dirs []string
	seen := map[string]bool{} // included files read, against include loops
	readLDConf("/etc/ld.so.conf", &dirs, seen)
	if triplet, ok := multiarch[m]; ok {
		dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet)
	}
	dirs = append(dirs, "/lib64", "/usr/lib64", "/lib", "/usr/lib")
	return slices.Compact(dirs)
}

// readLDConf appends the directories an ld.so.conf file lists; "include"
// lines name glob patterns of more such files. A missing file adds
// nothing, as for the loader.
func readLDConf(p string, dirs *[]string, seen map[string]bool) {
	if seen[p] {
		return
	}
	seen[p] = true
	data, err := os.ReadFile(p) //nolint:gosec // the build host's loader configuration
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(data), "\n") {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case fields[0] == "include":
			for _, pattern := range fields[1:] {
				if !path.IsAbs(pattern) {
					pattern = path.Join(path.Dir(p), pattern)
				}
				matches, _ := filepath.Glob(pattern) // only ErrBadPattern: nothing to include
				for _, m := range matches {
					readLDConf(m, dirs, seen)
				}
			}
		default:
			for _, dir := range fields {
				if path.IsAbs(dir) {
					*dirs = append(*dirs, path.Clean(dir))
				}
			}
		}
	}
}

// find returns the path of the library soname that a binary of info's
// machine and class can load.
func (lf libraryFinder) find(soname string, info binaryInfo) (string, error) {
	for _, dir := range lf.dirs {
		p := path.Join(dir, soname)
		f, err := elf.Open(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reading library %s: %w", p, err)
		}
		ok := f.Machine == info.machine && f.Class == info.class
		_ = f.Close()
		if ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("shared library %s not found in %s", soname, strings.Join(lf.dirs, ", "))
}

// libraries lists the host files the loader maps to start the binary info
// describes: the interpreter and every DT_NEEDED library, recursively, by
// the path the loader would find it at. A static binary needs none.
func (lf libraryFinder) libraries(info binaryInfo) ([]string, error) {
	var out []string
	if info.interp != "" {
		out = append(out, info.interp)
	}
	found := map[string]bool{} // sonames already resolved
	todo := slices.Clone(info.needed)
	for len(todo) > 0 {
		soname := todo[0]
		todo = todo[1:]
		if found[soname] {
			continue
		}
		found[soname] = true
		p, err := lf.find(soname, info)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
		lib, err := inspectBinary(p)
		if err != nil {
			return nil, err
		}
		todo = append(todo, lib.needed...)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// maxLinks bounds the symbolic links followed for one path, as the kernel
// does (ELOOP after 40).
const maxLinks = 40

// hostFile returns the entries that reproduce the host file at p in an
// image: each symbolic link met on the way as the same link (so
// /lib64/ld-linux-x86-64.so.2 keeps working through /lib64 -> usr/lib64
// and the absolute link inside it), each directory (0755, root) and the
// file itself with its permission bits. Resolving the links in the image
// then reaches the same file as on the host.
func hostFile(p string) ([]oci.Entry, error) {
	var out []oci.Entry
	todo := splitPath(p)
	cur := "/" // the resolved directory so far
	links := 0
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		if name == ".." {
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, name)
		fi, err := os.Lstat(next)
		if err != nil {
			return nil, fmt.Errorf("copying %s from the build host: %w", p, err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if links++; links > maxLinks {
				return nil, fmt.Errorf("copying %s from the build host: more than %d symbolic links", p, maxLinks)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return nil, fmt.Errorf("copying %s from the build host: %w", p, err)
			}
			out = append(out, oci.Symlink(next, target))
			if path.IsAbs(target) {
				cur = "/"
			}
			todo = append(splitPath(target), todo...)
		case fi.IsDir():
			if len(todo) == 0 {
				return nil, fmt.Errorf("copying %s from the build host: it is a directory", p)
			}
			out = append(out, oci.Dir(next, 0o755))
			cur = next
		case fi.Mode().IsRegular():
			if len(todo) > 0 {
				return nil, fmt.Errorf("copying %s from the build host: %s is a file", p, next)
			}
			out = append(out, oci.Entry{Path: next, Mode: fi.Mode().Perm(), Source: next})
		default:
			return nil, fmt.Errorf("copying %s from the build host: %s is %v", p, next, fi.Mode().Type())
		}
	}
	return out, nil
}

// splitPath splits a slash-separated path into its names, without empty
// names or ".".
func splitPath(p string) []string {
	var out []string
	for _, name := range strings.Split(p, "/") {
		if name != "" && name != "." {
			out = append(out, name)
		}
	}
	return out
}

// hostMachine is the ELF machine of the build host's own binaries (0 on
// a CPU elfPlatforms does not know).
func hostMachine() elf.Machine {
	for m, p := range elfPlatforms {
		if p.Architecture == runtime.GOARCH {
			return m
		}
	}
	return elf.EM_NONE
}

// crossLibraries returns the entries that give a dynamically linked
// binary for another machine its loader and libraries, found in
// sysroot/lib (Debian's cross layout; sysroot empty: /usr/<triplet>), and
// the files they are read from. In the image the loader is at the
// binary's PT_INTERP path and the libraries in /lib/<triplet>, where that
// machine's Debian loader looks first: e.g. for arm64
// /lib/ld-linux-aarch64.so.1 and /lib/aarch64-linux-gnu/libc.so.6.
func crossLibraries(info binaryInfo, sysroot string) ([]oci.Entry, []string, error) {
	triplet, ok := multiarch[info.machine]
	if !ok {
		return nil, nil, fmt.Errorf("no Debian multiarch name for %v", info.machine)
	}
	if sysroot == "" {
		sysroot = "/usr/" + triplet
	}
	libDir := filepath.Join(sysroot, "lib")
	if _, err := os.Stat(libDir); err != nil {
		return nil, nil, fmt.Errorf("a %s binary needs %s's C library, which is not on this host (%w): install Debian's cross compiler, which brings it (apt-get install gcc-%s)",
			elfPlatforms[info.machine].Architecture, triplet, err, triplet)
	}
	lf := libraryFinder{dirs: []string{libDir}}
	needed := info
	needed.interp = ""
	libs, err := lf.libraries(needed)
	if err != nil {
		return nil, nil, err
	}
	var entries []oci.Entry
	var files []string
	add := func(src, dst string) error {
		real, err := filepath.EvalSymlinks(src)
		if err != nil {
			return fmt.Errorf("resolving %s: %w", src, err)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return fmt.Errorf("reading %s: %w", real, err)
		}
		entries = append(entries, oci.Entry{Path: dst, Mode: fi.Mode().Perm(), Source: real})
		files = append(files, real)
		return nil
	}
	if info.interp != "" {
		if err := add(filepath.Join(libDir, path.Base(info.interp)), info.interp); err != nil {
			return nil, nil, fmt.Errorf("the loader %s: %w", info.interp, err)
		}
	}
	for _, l := range libs {
		if err := add(l, path.Join("/lib", triplet, path.Base(l))); err != nil {
			return nil, nil, err
		}
	}
	return entries, files, nil
}
