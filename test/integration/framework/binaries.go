package framework

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// KubernetesVersion is the version make test runs: kube-apiserver,
	// kube-scheduler, kube-controller-manager, kubectl and the real
	// node's kubelet and kube-proxy, pinned by test/tools/k8s-v1.37/go.mod.
	// The DRA driver needs it to be 1.36 or later (consumable capacity is
	// on by default from 1.36).
	KubernetesVersion = "v1.37.2"
	// KubernetesVersionOldest is the oldest version the extender, the
	// webhook and the device plugin are tested on (make test-k8s and make
	// node-test with K8S_VERSION=v1.34.3), pinned by
	// test/tools/k8s-v1.34/go.mod.
	KubernetesVersionOldest = "v1.34.3"
	// EtcdVersion is the version of etcd pinned by test/tools/etcd/go.mod.
	EtcdVersion = "v3.5.21"
	// ContainerdVersion is the version of containerd pinned by
	// test/tools/containerd/go.mod (ContainerdBinaries).
	ContainerdVersion = "v2.4.2"

	modulePath = "github.com/gpushare/gpushare"
)

// kubernetesToolDirs are the Kubernetes versions the harness builds:
// version -> the tool module (relative to the repository root) that pins it.
var kubernetesToolDirs = map[string]string{
	KubernetesVersion:       "test/tools/k8s-v1.37",
	KubernetesVersionOldest: "test/tools/k8s-v1.34",
}

// VersionEnv names the environment variable that picks the Kubernetes
// version of control planes started without Options.KubernetesVersion
// (and without Nodes): one of kubernetesToolDirs' versions, e.g. v1.34.3
// (make test-k8s). Unset or empty: KubernetesVersion.
const VersionEnv = "GPUSHARE_KUBERNETES_VERSION"

// DefaultKubernetesVersion is the version VersionEnv names, else
// KubernetesVersion; an error names the versions the harness builds.
func DefaultKubernetesVersion() (string, error) {
	v := os.Getenv(VersionEnv)
	if v == "" {
		return KubernetesVersion, nil
	}
	if err := CheckVersion(v); err != nil {
		return "", fmt.Errorf("%s=%s: %w", VersionEnv, v, err)
	}
	return v, nil
}

// CheckVersion returns nil when the harness builds Kubernetes version,
// else an error that names the versions it builds.
func CheckVersion(version string) error {
	if kubernetesToolDirs[version] == "" {
		return fmt.Errorf("the harness builds Kubernetes %s and %s, not %q", KubernetesVersion, KubernetesVersionOldest, version)
	}
	return nil
}

// Binaries holds the absolute paths of the control-plane executables.
type Binaries struct {
	Dir       string // the cache directory holding kube-apiserver and kube-scheduler
	Version   string // their Kubernetes version
	Etcd      string
	APIServer string
	Scheduler string
	// ControllerManager is kube-controller-manager of Version; "" unless
	// asked for (EnsureVersionBinaries).
	ControllerManager string
}

// CacheDir returns the directory the binaries are cached in:
// $GPUSHARE_CACHE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/gpushare/controlplane/<versions>.
func CacheDir() (string, error) { return versionCacheDir(KubernetesVersion) }

// versionCacheDir is CacheDir for a Kubernetes version: other versions
// than KubernetesVersion have their own directory beside it
// (<version>-etcd-<etcd version>), or under $GPUSHARE_CACHE_DIR/<version>.
func versionCacheDir(version string) (string, error) {
	if d := os.Getenv("GPUSHARE_CACHE_DIR"); d != "" {
		if version != KubernetesVersion {
			d = filepath.Join(d, version)
		}
		return filepath.Abs(d)
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("finding the cache directory: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "gpushare", "controlplane", version+"-etcd-"+EtcdVersion), nil
}

// RepoRoot walks up from the working directory to the directory whose go.mod
// declares module github.com/gpushare/gpushare.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && declaresModule(data, modulePath) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("finding the repository root: no go.mod declaring module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func declaresModule(gomod []byte, path string) bool {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "module" && strings.Trim(f[1], `"`) == path {
			return true
		}
	}
	return false
}

type buildSpec struct {
	name    string // binary name in the cache
	toolDir string // relative to the repo root
	pkg     string
	ldflags string
	tags    string // go build -tags, if any
	version string // what it reports, for the progress lines; "" is specVersion's guess
}

// etcdSpec builds etcd EtcdVersion.
func etcdSpec() buildSpec {
	return buildSpec{name: "etcd", toolDir: "test/tools/etcd", pkg: "go.etcd.io/etcd/server/v3", ldflags: "-s -w"}
}

// nodeSpecs are NodeBinaries' builds.
func nodeSpecs(version string) []buildSpec {
	return []buildSpec{kubernetesVersionSpec("kubelet", version), kubernetesVersionSpec("kube-proxy", version), kubernetesVersionSpec("kube-controller-manager", version)}
}

// kubernetesSpec builds k8s.io/kubernetes/cmd/NAME of KubernetesVersion
// (kubernetesVersionSpec).
func kubernetesSpec(name string) buildSpec { return kubernetesVersionSpec(name, KubernetesVersion) }

// kubernetesVersionSpec builds k8s.io/kubernetes/cmd/NAME in the tool
// module of version (kubernetesToolDirs), stamped with version (else it
// reports v0.0.0-master, which kubectl and kubelet's version skew checks
// cannot parse).
func kubernetesVersionSpec(name, version string) buildSpec {
	minor := strings.Split(version, ".")[1]
	var ld strings.Builder
	ld.WriteString("-s -w")
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		fmt.Fprintf(&ld, " -X %[1]s.gitVersion=%[2]s -X %[1]s.gitMajor=1 -X %[1]s.gitMinor=%[3]s -X %[1]s.gitTreeState=clean -X %[1]s.buildDate=1970-01-01T00:00:00Z", pkg, version, minor)
	}
	return buildSpec{name: name, toolDir: kubernetesToolDirs[version], pkg: "k8s.io/kubernetes/cmd/" + name, ldflags: ld.String(), version: version}
}

// kubectlSpec builds kubectl from the same pinned module as the control
// plane. Only the docs tests need it (they run the commands the docs give
// users), so EnsureBinaries leaves it out and EnsureKubectl builds it.
func kubectlSpec() buildSpec { return kubernetesSpec("kubectl") }

func specVersion(s buildSpec) string {
	switch {
	case s.version != "":
		return s.version
	case s.name == "etcd":
		return EtcdVersion
	case strings.HasSuffix(s.name, "-"+ContainerdVersion):
		return ContainerdVersion
	}
	return KubernetesVersion
}

// NodeBinaries holds the absolute paths of what a control plane with real
// nodes needs besides Binaries (test/node): kube-controller-manager, which
// runs the workload controllers, and a node's kubelet and kube-proxy.
type NodeBinaries struct {
	Dir               string // the cache directory, Binaries.Dir
	Version           string // their Kubernetes version
	ControllerManager string
	Kubelet           string
	Proxy             string
}

// ContainerdBinaries are containerd ContainerdVersion's daemon, runc shim
// and ctr, built from test/tools/containerd: the real node's runtime when a
// test needs one that applies CDI devices.
type ContainerdBinaries struct {
	Dir        string // the cache directory, Binaries.Dir
	Containerd string
	Shim       string // containerd-shim-runc-v2
	Ctr        string
}

// EnsureContainerdBinaries is EnsureBinaries for ContainerdBinaries
// (cold: a few minutes on two cores). Their names in the cache carry
// ContainerdVersion.
func EnsureContainerdBinaries(ctx context.Context) (ContainerdBinaries, error) {
	dir, err := CacheDir()
	if err != nil {
		return ContainerdBinaries{}, err
	}
	specs := containerdSpecs()
	if err := ensure(ctx, dir, specs); err != nil {
		return ContainerdBinaries{}, err
	}
	return ContainerdBinaries{
		Dir:        dir,
		Containerd: filepath.Join(dir, specs[0].name),
		Shim:       filepath.Join(dir, specs[1].name),
		Ctr:        filepath.Join(dir, specs[2].name),
	}, nil
}

// containerdSpecs are ContainerdBinaries' builds, in its field order.
// no_btrfs: the btrfs snapshotter needs C headers this machine lacks, and
// the node uses overlayfs.
func containerdSpecs() []buildSpec {
	ld := "-s -w -X github.com/containerd/containerd/v2/version.Version=" + ContainerdVersion
	var out []buildSpec
	for _, cmd := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		out = append(out, buildSpec{name: cmd + "-" + ContainerdVersion, toolDir: "test/tools/containerd",
			pkg: "github.com/containerd/containerd/v2/cmd/" + cmd, ldflags: ld, tags: "no_btrfs"})
	}
	return out
}

// EnsureBinaries returns the cached control-plane binaries of
// KubernetesVersion, building the missing ones with `go build` in the
// pinned tool modules. Progress goes to stderr. With GPUSHARE_SKIP_BUILD=1
// a missing binary is an error.
func EnsureBinaries(ctx context.Context) (Binaries, error) {
	return EnsureVersionBinaries(ctx, KubernetesVersion, false)
}

// EnsureVersionBinaries is EnsureBinaries for a Kubernetes version the
// harness builds (KubernetesVersion or KubernetesVersionOldest), with
// kube-controller-manager when kcm is set. etcd is always the one in
// CacheDir; a version other than KubernetesVersion has its own cache
// directory (cold: about 10, 1.5 and 3.5 minutes on two cores for
// kube-apiserver, kube-scheduler and kube-controller-manager).
func EnsureVersionBinaries(ctx context.Context, version string, kcm bool) (Binaries, error) {
	if err := CheckVersion(version); err != nil {
		return Binaries{}, fmt.Errorf("ensuring Kubernetes binaries: %w", err)
	}
	etcdDir, err := CacheDir()
	if err != nil {
		return Binaries{}, err
	}
	dir, err := versionCacheDir(version)
	if err != nil {
		return Binaries{}, err
	}
	specs := []buildSpec{kubernetesVersionSpec("kube-apiserver", version), kubernetesVersionSpec("kube-scheduler", version)}
	if kcm {
		specs = append(specs, kubernetesVersionSpec("kube-controller-manager", version))
	}
	if dir == etcdDir {
		// One ensure: etcd builds beside Kubernetes (buildGroups).
		specs = append(specs, etcdSpec())
	} else if err := ensure(ctx, etcdDir, []buildSpec{etcdSpec()}); err != nil {
		return Binaries{}, err
	}
	if err := ensure(ctx, dir, specs); err != nil {
		return Binaries{}, err
	}
	bins := Binaries{
		Dir:       dir,
		Version:   version,
		Etcd:      filepath.Join(etcdDir, "etcd"),
		APIServer: filepath.Join(dir, "kube-apiserver"),
		Scheduler: filepath.Join(dir, "kube-scheduler"),
	}
	if kcm {
		bins.ControllerManager = filepath.Join(dir, "kube-controller-manager")
	}
	return bins, nil
}

// EnsureNodeBinaries is EnsureBinaries for NodeBinaries: kubelet,
// kube-proxy and kube-controller-manager of KubernetesVersion, built from
// the same tool module test/tools/k8s-v1.37 into the same cache (cold, after
// kube-apiserver: about 1.5, 1 and 3.5 minutes on two cores).
func EnsureNodeBinaries(ctx context.Context) (NodeBinaries, error) {
	return EnsureNodeBinariesFor(ctx, KubernetesVersion)
}

// EnsureNodeBinariesFor is EnsureNodeBinaries for a version the harness
// builds (kubernetesToolDirs), into that version's cache directory.
func EnsureNodeBinariesFor(ctx context.Context, version string) (NodeBinaries, error) {
	if err := CheckVersion(version); err != nil {
		return NodeBinaries{}, fmt.Errorf("ensuring a node's Kubernetes binaries: %w", err)
	}
	dir, err := versionCacheDir(version)
	if err != nil {
		return NodeBinaries{}, err
	}
	if err := ensure(ctx, dir, nodeSpecs(version)); err != nil {
		return NodeBinaries{}, err
	}
	return NodeBinaries{
		Dir:               dir,
		Version:           version,
		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Kubelet:           filepath.Join(dir, "kubelet"),
		Proxy:             filepath.Join(dir, "kube-proxy"),
	}, nil
}

// EnsureNodeAndContainerd is EnsureNodeBinariesFor and
// EnsureContainerdBinaries at once: where the version's cache directory
// is containerd's (KubernetesVersion's), in one ensure, the two builds
// side by side; else one after the other.
func EnsureNodeAndContainerd(ctx context.Context, version string) (NodeBinaries, ContainerdBinaries, error) {
	if err := CheckVersion(version); err != nil {
		return NodeBinaries{}, ContainerdBinaries{}, fmt.Errorf("ensuring a node's Kubernetes binaries: %w", err)
	}
	ctrdDir, err := CacheDir()
	if err != nil {
		return NodeBinaries{}, ContainerdBinaries{}, err
	}
	dir, err := versionCacheDir(version)
	if err != nil {
		return NodeBinaries{}, ContainerdBinaries{}, err
	}
	if dir == ctrdDir {
		if err := ensure(ctx, dir, append(nodeSpecs(version), containerdSpecs()...)); err != nil {
			return NodeBinaries{}, ContainerdBinaries{}, err
		}
	}
	// Nothing is missing now where the dirs are one: these only name the
	// binaries (else they build them).
	node, err := EnsureNodeBinariesFor(ctx, version)
	if err != nil {
		return NodeBinaries{}, ContainerdBinaries{}, err
	}
	ctrd, err := EnsureContainerdBinaries(ctx)
	return node, ctrd, err
}

// ensure builds the specs missing from dir, under dir's lock. Specs that
// share a tool module, ldflags and tags are built by one go build (their
// common packages compiled once, their links side by side), and such
// groups at once, rather than one build and link after another (a cold
// make test: 63.1 min before, with its warm-up started earlier too, 56.3
// min after; docs/development.md).
func ensure(ctx context.Context, dir string, specs []buildSpec) error {
	if len(missing(dir, specs)) == 0 {
		return nil
	}
	if os.Getenv("GPUSHARE_SKIP_BUILD") == "1" {
		m := missing(dir, specs)
		return fmt.Errorf("ensuring Kubernetes binaries: %s missing from %s and GPUSHARE_SKIP_BUILD=1 (build with `go run ./test/cmd/controlplane build`)", m[0].name, dir)
	}
	root, err := RepoRoot()
	if err != nil {
		return fmt.Errorf("ensuring Kubernetes binaries: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating the binary cache: %w", err)
	}
	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return err
	}
	defer unlock()
	// Another process may have built some while we waited for the lock.
	groups := buildGroups(missing(dir, specs))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i, g := range groups {
		wg.Go(func() { errs[i] = build(ctx, root, dir, g) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// buildGroups splits specs into the groups one go build can make: the same
// tool module, ldflags and tags; in the order of each group's first spec.
func buildGroups(specs []buildSpec) [][]buildSpec {
	type key struct{ toolDir, ldflags, tags string }
	var order []key
	groups := map[key][]buildSpec{}
	for _, s := range specs {
		k := key{s.toolDir, s.ldflags, s.tags}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], s)
	}
	out := make([][]buildSpec, 0, len(order))
	for _, k := range order {
		out = append(out, groups[k])
	}
	return out
}

// EnsureKubectl returns the path of kubectl KubernetesVersion in the
// binary cache, building it like the control plane (cold: a few minutes)
// if it is missing, under the same lock. With GPUSHARE_SKIP_BUILD=1 a
// missing kubectl is an error.
func EnsureKubectl(ctx context.Context) (string, error) {
	dir, err := CacheDir()
	if err != nil {
		return "", err
	}
	spec := kubectlSpec()
	if err := ensure(ctx, dir, []buildSpec{spec}); err != nil {
		return "", err
	}
	return filepath.Join(dir, spec.name), nil
}

func missing(dir string, specs []buildSpec) []buildSpec {
	var out []buildSpec
	for _, s := range specs {
		fi, err := os.Stat(filepath.Join(dir, s.name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			out = append(out, s)
		}
	}
	return out
}

// lockDir takes an exclusive flock on dir/.lock, giving up when ctx ends.
func lockDir(ctx context.Context, dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the build lock: %w", err)
	}
	announced := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		if !announced {
			fmt.Fprintf(os.Stderr, "waiting for another process building the control plane in %s\n", dir)
			announced = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for the build lock %s: %w", f.Name(), ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// build runs one go build for specs (one buildGroups group) into a
// temporary directory of dir, then moves each binary to its name in dir.
func build(ctx context.Context, root, dir string, specs []buildSpec) error {
	cold := map[string]string{"etcd": "~1 min", "kube-apiserver": "~10 min", "kube-scheduler": "~5 min", "kubectl": "~5 min",
		"kubelet": "~1.5 min after kube-apiserver", "kube-proxy": "~1 min after kubelet", "kube-controller-manager": "~3.5 min after kube-apiserver"}
	var what, built []string
	pkgs := make([]string, 0, len(specs))
	for _, s := range specs {
		c := cold[s.name]
		if c == "" {
			c = "a few min"
		}
		what = append(what, fmt.Sprintf("%s %s (cold: %s on 2 cores)", s.name, specVersion(s), c))
		built = append(built, s.name)
		pkgs = append(pkgs, s.pkg)
	}
	names := strings.Join(built, ", ")
	fmt.Fprintf(os.Stderr, "building %s\n", strings.Join(what, ", "))
	start := time.Now()
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return fmt.Errorf("building %s: %w", names, err)
	}
	defer os.RemoveAll(tmp)
	s := specs[0]
	args := []string{"build", "-trimpath", "-ldflags=" + s.ldflags, "-o", tmp + string(filepath.Separator)}
	if s.tags != "" {
		args = append(args, "-tags="+s.tags)
	}
	cmd := exec.CommandContext(ctx, "go", append(args, pkgs...)...) //nolint:gosec // G204: go build of a pinned tool module
	cmd.Dir = filepath.Join(root, filepath.FromSlash(s.toolDir))
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s in %s: %w\n%s", names, cmd.Dir, err, LastLines(out.String(), 30))
	}
	for _, s := range specs {
		if err := os.Rename(filepath.Join(tmp, execName(s.pkg)), filepath.Join(dir, s.name)); err != nil {
			return fmt.Errorf("installing %s: %w", s.name, err)
		}
	}
	fmt.Fprintf(os.Stderr, "built %s in %s\n", names, time.Since(start).Round(time.Second))
	return nil
}

// execName is the file go build -o DIR/ writes for the main package pkg:
// its last path element, or the one before a major version suffix
// (go.etcd.io/etcd/server/v3 -> server).
func execName(pkg string) string {
	elems := strings.Split(pkg, "/")
	last := elems[len(elems)-1]
	if len(elems) > 1 && len(last) > 1 && last[0] == 'v' && last[1] != '0' && strings.Trim(last[1:], "0123456789") == "" {
		return elems[len(elems)-2]
	}
	return last
}
