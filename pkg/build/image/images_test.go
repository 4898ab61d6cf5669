package image

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/gpushare/gpushare/pkg/build/oci"
	"github.com/gpushare/gpushare/test/util"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const (
	testVersion  = "v0.0.0-imagetest"
	testRevision = "0123456789abcdef0123456789abcdef01234567"
	// repoRoot is the repository root, from this package's directory.
	repoRoot = "../../.."
)

// The requirements, stated apart from the recipes they check.
var (
	// wantUser: the extender and the kubectl plugin run as a non-root UID;
	// the device plugin and the DRA driver need root.
	wantUser = map[string]string{
		"gpushare-dra-driver":         "0:0",
		"gpushare-scheduler-extender": "65532:65532",
		"kubectl-inspect-gpushare":    "65532:65532",
		"gpushare-device-plugin":      "0:0",
	}
	// wantVersionLine is what each binary prints for --version.
	wantVersionLine = map[string]string{
		"gpushare-dra-driver":         testVersion,
		"gpushare-scheduler-extender": testVersion,
		"kubectl-inspect-gpushare":    "kubectl inspect gpushare version " + testVersion,
		"gpushare-device-plugin":      testVersion,
	}
)

// built holds the ocibuild command and the images it built once, as make
// images does, for all tests of the package, under a directory TestMain
// removes. The images are built in a child process: under -race, this
// process would take minutes to compress them.
var built struct {
	once     sync.Once
	dir      string // holds ocibuild and out
	ocibuild string // the command's binary
	out      string // the images: NAME/, NAME.tar and bin/NAME
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildImages returns the directory holding the images and the binaries
// (under bin/) that ocibuild built.
func buildImages(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the images hold Linux binaries, and the device plugin's the build host's glibc")
	}
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "imagebuild-test-"); built.err != nil {
			return
		}
		built.ocibuild = filepath.Join(built.dir, "ocibuild")
		if out, err := exec.Command("go", "build", "-o", built.ocibuild, "../../../hack/ocibuild").CombinedOutput(); err != nil {
			built.err = fmt.Errorf("building ocibuild: %w\n%s", err, out)
			return
		}
		built.out = filepath.Join(built.dir, "out")
		built.err = runOcibuild(t, built.out)
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.out
}

// runOcibuild runs the ocibuild command with the Go-native builder into
// out and logs its summary.
func runOcibuild(t *testing.T, out string) error {
	cmd := exec.Command(built.ocibuild, "--builder=go", "--version="+testVersion, "--revision="+testRevision, "--dir="+repoRoot, "--out="+out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s%s", cmd, err, stdout.String(), stderr.String())
	}
	t.Logf("%s\n%s", cmd, stdout.String())
	return nil
}

// binaries returns the recipe name -> binary path of the built binaries.
func binaries(t *testing.T) map[string]string {
	t.Helper()
	out := buildImages(t)
	bins := map[string]string{}
	for _, r := range Recipes() {
		bins[r.Name] = filepath.Join(out, "bin", r.Name)
	}
	return bins
}

// TestImages builds the four images with the Go-native builder, reads
// them back (Read verifies every digest) and checks what a runtime would
// use: the platform, user, entrypoint, environment and labels; that the
// entrypoint is an executable file of the image; and that the image runs
// it on its own: extracted into a directory, chrooted into it, as the
// image's user, it prints the stamped version. For the device plugin that
// proves the image holds the loader and every library the binary needs.
func TestImages(t *testing.T) {
	out := buildImages(t)
	for _, r := range Recipes() {
		t.Run(r.Name, func(t *testing.T) {
			t.Parallel()
			l, err := oci.Read(filepath.Join(out, r.Name))
			if err != nil {
				t.Fatal(err)
			}
			cfg := l.Config.Config
			gotJSON, err := json.MarshalIndent(cfg, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			util.Golden(t, r.Name+".config.json", string(gotJSON)+"\n", *update)

			if l.Config.OS != "linux" || l.Config.Architecture != runtime.GOARCH {
				t.Errorf("platform %s/%s, want linux/%s", l.Config.OS, l.Config.Architecture, runtime.GOARCH)
			}
			if cfg.User != wantUser[r.Name] {
				t.Errorf("user %q, want %q", cfg.User, wantUser[r.Name])
			}
			wantEntrypoint := []string{"/usr/local/bin/" + r.Name}
			if diff := cmp.Diff(wantEntrypoint, cfg.Entrypoint); diff != "" {
				t.Errorf("entrypoint (-want +got):\n%s", diff)
			}
			for key, want := range map[string]string{
				"org.opencontainers.image.version":  testVersion,
				"org.opencontainers.image.revision": testRevision,
				"org.opencontainers.image.source":   "https://github.com/gpushare/gpushare",
				"org.opencontainers.image.title":    r.Name,
			} {
				if got := cfg.Labels[key]; got != want {
					t.Errorf("label %s = %q, want %q", key, got, want)
				}
			}
			if got := l.Descriptor.Annotations[oci.AnnotationRefName]; got != testVersion {
				t.Errorf("index ref.name %q, want the version %q", got, testVersion)
			}

			root := extract(t, l)
			checkEntrypoint(t, root, wantEntrypoint[0])
			checkUserExists(t, root, cfg.User)
			var stdout, stderr bytes.Buffer
			if err := runInImage(root, l.Config, []string{"--version"}, &stdout, &stderr); err != nil {
				t.Fatalf("running %s --version in the image: %v\nstdout: %s\nstderr: %s", wantEntrypoint[0], err, stdout.String(), stderr.String())
			}
			if got := strings.TrimSpace(stdout.String()); got != wantVersionLine[r.Name] {
				t.Errorf("%s --version in the image printed %q, want %q", r.Name, got, wantVersionLine[r.Name])
			}
		})
	}
}

// checkEntrypoint checks that the entrypoint is a regular file of the
// extracted tree at root that everyone may execute and only its owner
// write, and (when the test runs as root, so the tree keeps the layers'
// owners) that root owns it.
func checkEntrypoint(t *testing.T, root, entrypoint string) {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(root, entrypoint))
	if err != nil {
		t.Fatalf("the entrypoint: %v", err)
	}
	if fi.Mode() != 0o755 {
		t.Errorf("entrypoint %s: mode %v, want -rwxr-xr-x", entrypoint, fi.Mode())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && (st.Uid != 0 || st.Gid != 0) {
		t.Errorf("entrypoint %s: owner %d:%d, want 0:0", entrypoint, st.Uid, st.Gid)
	}
}

// extract unpacks l into a new directory (with the layers' owners when
// the test runs as root) and returns it.
func extract(t *testing.T, l *oci.Layout) string {
	t.Helper()
	root := t.TempDir()
	if err := l.Extract(root, os.Geteuid() == 0); err != nil {
		t.Fatal(err)
	}
	return root
}

// checkUserExists checks that /etc/passwd of the tree at root names the
// UID of user ("UID:GID").
func checkUserExists(t *testing.T, root, user string) {
	t.Helper()
	uid, _, _ := strings.Cut(user, ":")
	data, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if fields := strings.Split(line, ":"); len(fields) == 7 && fields[2] == uid {
			return
		}
	}
	t.Errorf("/etc/passwd names no user %s:\n%s", uid, data)
}

// parseUser splits "UID:GID".
func parseUser(user string) (uid, gid uint32, err error) {
	u, g, ok := strings.Cut(user, ":")
	if !ok {
		return 0, 0, fmt.Errorf("user %q is not UID:GID", user)
	}
	uid64, err := strconv.ParseUint(u, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q: %w", user, err)
	}
	gid64, err := strconv.ParseUint(g, 10, 32)
	if err != nil {
		return 0, 0, fmt.Errorf("user %q: %w", user, err)
	}
	return uint32(uid64), uint32(gid64), nil
}

// runInImage runs the image's entrypoint with args, chrooted into root (an
// extracted image), as the image's user, with the image's environment and
// working directory, and nothing of the host's filesystem. As root that
// is a plain chroot and setuid; otherwise a new user namespace maps the
// image's user to the caller, which lets it chroot.
func runInImage(root string, cfg *v1.ConfigFile, args []string, stdout, stderr io.Writer) error {
	uid, gid, err := parseUser(cfg.Config.User)
	if err != nil {
		return err
	}
	argv := append(append([]string{}, cfg.Config.Entrypoint...), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = cfg.Config.Env
	cmd.Dir = cfg.Config.WorkingDir
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	if os.Geteuid() != 0 {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: int(uid), HostID: os.Getuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: os.Getgid(), Size: 1}}
		cmd.SysProcAttr.Credential.NoSetGroups = true
	}
	return cmd.Run()
}

// TestDeterministic: building the images again, binaries included, gives
// byte-identical archives (so the same digests); and the two static
// images share their first layer (the skeleton), which a registry then
// stores once.
func TestDeterministic(t *testing.T) {
	first := buildImages(t)
	second := filepath.Join(t.TempDir(), "out")
	if err := runOcibuild(t, second); err != nil {
		t.Fatal(err)
	}
	for _, r := range Recipes() {
		a1, err := os.ReadFile(filepath.Join(first, r.Name+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		a2, err := os.ReadFile(filepath.Join(second, r.Name+".tar"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a1, a2) {
			t.Errorf("%s: the archives of two builds differ", r.Name)
		}
	}
	ext, kubectl := firstLayer(t, first, "gpushare-scheduler-extender"), firstLayer(t, first, "kubectl-inspect-gpushare")
	if ext != kubectl {
		t.Errorf("the static images' skeleton layers differ: %s and %s", ext, kubectl)
	}
}

// firstLayer is the digest of the bottom layer of the image NAME under out,
// from its manifest.
func firstLayer(t *testing.T, out, name string) string {
	t.Helper()
	var index v1.IndexManifest
	var manifest v1.Manifest
	readJSONFile(t, filepath.Join(out, name, "index.json"), &index)
	readJSONFile(t, filepath.Join(out, name, "blobs", "sha256", index.Manifests[0].Digest.Hex), &manifest)
	return manifest.Layers[0].Digest.String()
}

func readJSONFile(t *testing.T, p string, v any) {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

// nvmlStub stands in for the driver's libnvidia-ml.so.1: nvmlInit_v2
// fails with NVML_ERROR_DRIVER_NOT_LOADED (9) and nvmlErrorString names
// the stub, so the plugin's error shows that it called into this file.
const nvmlStub = `
int nvmlInit_v2(void) { return 9; }
int nvmlInitWithFlags(unsigned int flags) { return 9; }
int nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(int r) { return "gpushare image test stub"; }
`

// TestDevicePluginFindsInjectedNVML puts a stub libnvidia-ml.so.1 where the
// NVIDIA container runtime (libnvidia-container, legacy mode) mounts the
// driver's: /usr/lib/<triplet> when the image has /etc/debian_version,
// else /usr/lib64; and runs each image that calls NVML (the device plugin
// and the DRA driver: the cgo recipes) with no --fake-gpus. Its NVML error
// must come from the stub: the image's loader finds an injected library
// without an ld.so.cache.
func TestDevicePluginFindsInjectedNVML(t *testing.T) {
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("no gcc to compile the stub library with")
	}
	bins := binaries(t)
	for _, r := range Recipes() {
		if !r.CGO {
			continue
		}
		t.Run(r.Name, func(t *testing.T) {
			l, err := oci.Read(filepath.Join(buildImages(t), r.Name))
			if err != nil {
				t.Fatal(err)
			}
			root := extract(t, l)

			libDir := "/usr/lib64"
			if _, err := os.Stat(filepath.Join(root, "etc", "debian_version")); err == nil {
				info, err := inspectBinary(bins[r.Name])
				if err != nil {
					t.Fatal(err)
				}
				libDir = "/usr/lib/" + multiarch[info.machine]
			}
			src := filepath.Join(t.TempDir(), "nvml.c")
			if err := os.WriteFile(src, []byte(nvmlStub), 0o600); err != nil {
				t.Fatal(err)
			}
			lib := filepath.Join(root, libDir, "libnvidia-ml.so.1")
			if err := os.MkdirAll(filepath.Dir(lib), 0o755); err != nil {
				t.Fatal(err)
			}
			if out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput(); err != nil {
				t.Fatalf("compiling the stub: %v\n%s", err, out)
			}

			var stdout, stderr bytes.Buffer
			err = runInImage(root, l.Config, []string{"--node-name=imagetest"}, &stdout, &stderr)
			var exitErr *exec.ExitError
			if !errors.As(err, &exitErr) {
				t.Fatalf("%s with a stub NVML: %v, want it to exit with an error\nstderr: %s", r.Name, err, stderr.String())
			}
			if !strings.Contains(stderr.String(), "gpushare image test stub") {
				t.Errorf("%s's error does not come from the stub at %s:\n%s", r.Name, libDir, stderr.String())
			}
		})
	}
}

// TestStaticRecipesAreStatic: the extender and kubectl plugin binaries need
// no loader and no library (their images have no libc), the device plugin's
// needs both.
func TestStaticRecipesAreStatic(t *testing.T) {
	bins := binaries(t)
	for _, r := range Recipes() {
		info, err := inspectBinary(bins[r.Name])
		if err != nil {
			t.Fatal(err)
		}
		if info.static() == r.CGO {
			t.Errorf("%s: static %v (loader %q, libraries %v), cgo recipe %v", r.Name, info.static(), info.interp, info.needed, r.CGO)
		}
	}
}

// TestPackRefusesADynamicBinaryForAStaticImage: a static image has no libc,
// so packing a dynamically linked binary into it is an error, not an image
// that fails at start.
func TestPackRefusesADynamicBinaryForAStaticImage(t *testing.T) {
	bins := binaries(t)
	r := Recipes()[0]
	_, err := Pack(r, bins["gpushare-device-plugin"], PackOptions{Version: testVersion, Out: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "linked dynamically") {
		t.Errorf("Pack of a dynamic binary as %s: %v, want a refusal", r.Name, err)
	}
}

// TestMissingLibrary: a library the loader would not find is an error
// naming it, not an image that fails at start.
func TestMissingLibrary(t *testing.T) {
	bins := binaries(t)
	var dp Recipe
	for _, r := range Recipes() {
		if r.CGO {
			dp = r
		}
	}
	empty := t.TempDir()
	_, err := Pack(dp, bins[dp.Name], PackOptions{Version: testVersion, Out: t.TempDir(), LibraryDirs: []string{empty}})
	if err == nil || !strings.Contains(err.Error(), "libc.so.6 not found in "+empty) {
		t.Errorf("Pack with no libraries to find: %v, want libc.so.6 not found", err)
	}
}

// TestHostFile: a host path reached through links is reproduced link by
// link, relative and absolute, so it resolves in the image as on the host.
func TestHostFile(t *testing.T) {
	dir := t.TempDir()
	mustDo(t, os.MkdirAll(filepath.Join(dir, "usr", "lib", "triplet"), 0o755))
	mustDo(t, os.WriteFile(filepath.Join(dir, "usr", "lib", "triplet", "ld.so"), []byte("loader"), 0o755))
	mustDo(t, os.Symlink("usr/lib", filepath.Join(dir, "lib")))
	mustDo(t, os.MkdirAll(filepath.Join(dir, "usr", "lib64"), 0o755))
	mustDo(t, os.Symlink(filepath.Join(dir, "lib", "triplet", "ld.so"), filepath.Join(dir, "usr", "lib64", "ld.so")))
	mustDo(t, os.Symlink("usr/lib64", filepath.Join(dir, "lib64")))

	entries, err := hostFile(filepath.Join(dir, "lib64", "ld.so"))
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Path, Link string
		Mode       fs.FileMode
	}
	var gotEntries []got
	for _, e := range entries {
		if rel, ok := strings.CutPrefix(e.Path, dir); ok && rel != "" {
			gotEntries = append(gotEntries, got{Path: rel, Link: strings.TrimPrefix(e.Linkname, dir), Mode: e.Mode})
		}
	}
	want := []got{
		{Path: "/lib64", Link: "usr/lib64", Mode: fs.ModeSymlink | 0o777},
		{Path: "/usr", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/lib64", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/lib64/ld.so", Link: "/lib/triplet/ld.so", Mode: fs.ModeSymlink | 0o777},
		{Path: "/lib", Link: "usr/lib", Mode: fs.ModeSymlink | 0o777},
		{Path: "/usr", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/lib", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/lib/triplet", Mode: fs.ModeDir | 0o755},
		{Path: "/usr/lib/triplet/ld.so", Mode: 0o755},
	}
	if diff := cmp.Diff(want, gotEntries); diff != "" {
		t.Errorf("entries under %s (-want +got):\n%s", dir, diff)
	}
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
