package image

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/build/oci"
)

// otherArch is the architecture a release cross-builds on this host, and
// its ELF machine: arm64 on amd64 and the other way round.
func otherArch(t *testing.T) (string, elf.Machine) {
	t.Helper()
	switch runtime.GOARCH {
	case "amd64":
		return "arm64", elf.EM_AARCH64
	case "arm64":
		return "amd64", elf.EM_X86_64
	}
	t.Skipf("no second architecture known beside %s", runtime.GOARCH)
	return "", 0
}

// TestCrossLibrariesNeedTheSysroot: packing a dynamically linked binary
// for another machine without that machine's C library on the host is an
// error naming the Debian package that brings it.
func TestCrossLibrariesNeedTheSysroot(t *testing.T) {
	_, m := otherArch(t)
	info := binaryInfo{machine: m, class: elf.ELFCLASS64, interp: "/lib/ld.so.1", needed: []string{"libc.so.6"}}
	_, _, err := crossLibraries(info, filepath.Join(t.TempDir(), "absent"))
	if err == nil || !strings.Contains(err.Error(), "apt-get install gcc-"+multiarch[m]) {
		t.Errorf("crossLibraries without a sysroot: %v, want the package to install", err)
	}
}

// cgoProgram is a tiny cgo program: it prints through the C library, so
// its image needs the loader and libc of its machine.
const cgoProgram = `package main

/*
#include <stdio.h>
static void hello(void) { printf("hello from C\n"); fflush(stdout); }
*/
import "C"

func main() { C.hello() }
`

// TestPackForAnotherMachine builds a cgo program for the other
// architecture with Debian's cross compiler (skipped without it) and packs
// it: the image is for that platform, holds the loader at the binary's
// PT_INTERP path and the libraries in /lib/<triplet>, all of that
// machine; where qemu-user-static is installed the extracted image runs
// the program, which proves the loader finds every library in the image.
func TestPackForAnotherMachine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the Go-native builder runs on Linux only")
	}
	arch, m := otherArch(t)
	triplet := multiarch[m]
	cc, err := exec.LookPath(triplet + "-gcc")
	if err != nil {
		t.Skipf("no %s-gcc (apt-get install gcc-%s)", triplet, triplet)
	}
	dir := t.TempDir()
	for name, data := range map[string]string{"main.go": cgoProgram, "go.mod": "module crosstest\n\ngo 1.25\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "hello")
	build := exec.Command("go", "build", "-trimpath", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=1", "GOOS=linux", "GOARCH="+arch, "CC="+cc, "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("cross-building the cgo program: %v\n%s", err, out)
	}
	r := Recipe{Name: "hello", Package: ".", CGO: true, User: RootUser}
	res, err := Pack(r, bin, PackOptions{Version: testVersion, Revision: testRevision, Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	l, err := oci.Read(res.Layout)
	if err != nil {
		t.Fatal(err)
	}
	if l.Config.Architecture != arch || l.Descriptor.Platform == nil || l.Descriptor.Platform.Architecture != arch {
		t.Errorf("image platform %s/%s (descriptor %v), want linux/%s", l.Config.OS, l.Config.Architecture, l.Descriptor.Platform, arch)
	}
	info, err := inspectBinary(bin)
	if err != nil {
		t.Fatal(err)
	}
	root := extract(t, l)
	for _, p := range []string{info.interp, "/lib/" + triplet + "/libc.so.6", r.Binary()} {
		f, err := elf.Open(filepath.Join(root, p))
		if err != nil {
			t.Errorf("image file %s: %v", p, err)
			continue
		}
		if f.Machine != m {
			t.Errorf("image file %s is for %v, want %v", p, f.Machine, m)
		}
		_ = f.Close()
	}
	for _, lib := range res.Libraries {
		if !strings.HasPrefix(lib, "/usr/"+triplet+"/") {
			t.Errorf("library %s does not come from the cross sysroot /usr/%s", lib, triplet)
		}
	}
	qemu, err := exec.LookPath("qemu-" + map[string]string{"arm64": "aarch64", "amd64": "x86_64"}[arch] + "-static")
	if err != nil {
		t.Log("no qemu-user-static: the image's program is not run")
		return
	}
	var stdout, stderr bytes.Buffer
	run := exec.Command(qemu, "-L", root, filepath.Join(root, r.Binary()))
	run.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	run.Stdout, run.Stderr = &stdout, &stderr
	if err := run.Run(); err != nil {
		t.Fatalf("running the %s image's program under %s: %v\n%s", arch, qemu, err, stderr.String())
	}
	if diff := cmp.Diff("hello from C\n", stdout.String()); diff != "" {
		t.Errorf("the program's output (-want +got):\n%s", diff)
	}
}
