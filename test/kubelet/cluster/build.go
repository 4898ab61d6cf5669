package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpushare/gpushare/pkg/build/image"
	"github.com/gpushare/gpushare/test/integration/framework"
)

// Binaries are the executables a cluster runs.
type Binaries struct {
	ControlPlane framework.Binaries
	Extender     string // gpushare-scheduler-extender
	DevicePlugin string // gpushare-device-plugin
	Inspect      string // kubectl-inspect-gpushare
	NodeAgent    string // gpushare-nodeagent (test double of the kubelet)
}

// BuildError is a failed `go build`, with the end of its output.
type BuildError struct {
	Target string // binary name
	Dir    string // where go build ran
	Output string // its last lines
	Err    error
}

func (e *BuildError) Error() string {
	return fmt.Sprintf("building %s failed (go build in %s: %v):\n%s", e.Target, e.Dir, e.Err, e.Output)
}

func (e *BuildError) Unwrap() error { return e.Err }

// Build builds the control plane once (framework.EnsureBinaries, cached in
// ~/.cache/gpushare) and our four binaries into binDir, stamped with the
// Makefile's version; Go's build cache makes a rebuild with no change take well
// under a second each. Progress goes to progress.
func Build(ctx context.Context, binDir string, progress io.Writer) (Binaries, error) {
	root, err := framework.RepoRoot()
	if err != nil {
		return Binaries{}, err
	}
	if progress == nil {
		progress = io.Discard
	}
	cp, err := framework.EnsureBinaries(ctx)
	if err != nil {
		return Binaries{}, fmt.Errorf("building the control plane (etcd, kube-apiserver, kube-scheduler): %w", err)
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return Binaries{}, fmt.Errorf("creating %s: %w", binDir, err)
	}
	binDir, err = filepath.Abs(binDir)
	if err != nil {
		return Binaries{}, fmt.Errorf("resolving %s: %w", binDir, err)
	}
	b := binariesIn(cp, binDir)
	version := gitVersion(ctx, root)
	// Ours are built as their images build them (pkg/build/image's recipes:
	// -trimpath, cgo only for the device plugin), so a cold make test
	// compiles their dependencies once for both, not twice.
	outs := map[string]string{"gpushare-scheduler-extender": b.Extender, "gpushare-device-plugin": b.DevicePlugin, "kubectl-inspect-gpushare": b.Inspect}
	var targets []target
	for _, r := range image.Recipes() {
		if out, ok := outs[r.Name]; ok {
			targets = append(targets, target{out: out, dir: r.Dir(root), args: r.GoArgs(version, out), env: r.GoEnv()})
		}
	}
	// The node agent is built like the caller: with -race in the tests
	// (raceEnabled), sharing their compile of k8s.io/kubernetes' kubelet
	// packages; else (make demo) with -trimpath, its client-go compiled as
	// the device plugin's is (cgo on, -trimpath).
	agentFlag := "-trimpath"
	if raceEnabled {
		agentFlag = "-race"
	}
	targets = append(targets, target{out: b.NodeAgent, dir: filepath.Join(root, "test", "kubelet"),
		args: []string{"build", agentFlag, "-ldflags", "-X " + image.VersionVariable + "=" + version, "-o", b.NodeAgent, "./cmd/nodeagent"}})
	for _, t := range targets {
		start := time.Now()
		cmd := exec.CommandContext(ctx, "go", t.args...)
		cmd.Dir = t.dir
		cmd.Env = append(os.Environ(), t.env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return Binaries{}, &BuildError{Target: filepath.Base(t.out), Dir: t.dir, Output: framework.LastLines(out.String(), 30), Err: err}
		}
		fmt.Fprintf(progress, "built %s in %.1fs\n", relTo(root, t.out), time.Since(start).Seconds())
	}
	return b, nil
}

// target is one go build: its output, directory, arguments and the
// environment it adds.
type target struct {
	out, dir string
	args     []string
	env      []string
}

// gitVersion is the Makefile's VERSION: git describe, or "dev".
func gitVersion(ctx context.Context, root string) string {
	cmd := exec.CommandContext(ctx, "git", "describe", "--tags", "--always", "--dirty")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "dev"
	}
	return strings.TrimSpace(string(out))
}

func relTo(root, path string) string {
	if r, err := filepath.Rel(root, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}

// Installed returns the binaries that Build put in binDir, without building
// ours; an error names a missing one.
func Installed(ctx context.Context, binDir string) (Binaries, error) {
	cp, err := framework.EnsureBinaries(ctx)
	if err != nil {
		return Binaries{}, err
	}
	binDir, err = filepath.Abs(binDir)
	if err != nil {
		return Binaries{}, fmt.Errorf("resolving %s: %w", binDir, err)
	}
	b := binariesIn(cp, binDir)
	for _, p := range []string{b.Extender, b.DevicePlugin, b.Inspect, b.NodeAgent} {
		if _, err := os.Stat(p); err != nil {
			return Binaries{}, fmt.Errorf("%s is missing (build it with cluster.Build or make demo): %w", p, err)
		}
	}
	return b, nil
}

func binariesIn(cp framework.Binaries, binDir string) Binaries {
	return Binaries{
		ControlPlane: cp,
		Extender:     filepath.Join(binDir, "gpushare-scheduler-extender"),
		DevicePlugin: filepath.Join(binDir, "gpushare-device-plugin"),
		Inspect:      filepath.Join(binDir, "kubectl-inspect-gpushare"),
		NodeAgent:    filepath.Join(binDir, "gpushare-nodeagent"),
	}
}
