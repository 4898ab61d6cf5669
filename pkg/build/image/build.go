package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"
)

// Builder names a way to build the images.
type Builder string

// The builders, in the order Auto tries them.
const (
	// Docker builds build/*.Dockerfile with `docker build`; it needs a
	// daemon that answers `docker info`.
	Docker Builder = "docker"
	// Podman and Buildah build the Dockerfiles with no daemon.
	Podman  Builder = "podman"
	Buildah Builder = "buildah"
	// GoNative compiles the binaries with the Go toolchain and writes OCI
	// layouts and archives (Pack); it needs neither a daemon nor a registry.
	GoNative Builder = "go"
	// Auto picks the first usable of the above.
	Auto Builder = "auto"
)

// dockerInfoTimeout bounds `docker info`, which waits on an unresponsive
// daemon.
const dockerInfoTimeout = 15 * time.Second

// Command is one program run.
type Command struct {
	// Dir is the working directory; empty: the caller's.
	Dir string
	// Env is added to the caller's environment.
	Env  []string
	Name string
	Args []string
}

// String is the command as a shell would show it.
func (c Command) String() string {
	return strings.Join(append(append(slices.Clone(c.Env), c.Name), c.Args...), " ")
}

// Runner finds and runs programs; tests give a fake.
type Runner interface {
	LookPath(file string) (string, error)
	Run(ctx context.Context, c Command, stdout, stderr io.Writer) error
}

// ExecRunner runs programs with os/exec.
type ExecRunner struct{}

var _ Runner = ExecRunner{}

// LookPath finds file on PATH.
func (ExecRunner) LookPath(file string) (string, error) { return exec.LookPath(file) }

// Run runs c and waits for it.
func (ExecRunner) Run(ctx context.Context, c Command, stdout, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, c.Name, c.Args...) //nolint:gosec // the builders and go, with arguments this package makes
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	return cmd.Run()
}

// Choose picks the builder: want names one, which must be usable, or is
// Auto for the first usable of docker (with a daemon), podman and buildah,
// and else the Go-native builder. note says in one line which and why.
func Choose(ctx context.Context, r Runner, want Builder) (b Builder, note string, err error) {
	switch want {
	case GoNative:
		return GoNative, "images: building with the Go-native builder (hack/ocibuild), as asked", nil
	case Docker, Podman, Buildah:
		if why := unusable(ctx, r, want); why != "" {
			return "", "", fmt.Errorf("image builder %s: %s", want, why)
		}
		return want, fmt.Sprintf("images: building with %s and build/*.Dockerfile, as asked", want), nil
	case Auto, "":
	default:
		return "", "", fmt.Errorf("image builder %q: want one of auto, docker, podman, buildah, go", want)
	}
	var skipped []string
	for _, b := range []Builder{Docker, Podman, Buildah} {
		why := unusable(ctx, r, b)
		if why == "" {
			return b, fmt.Sprintf("images: building with %s and build/*.Dockerfile (found first of docker, podman, buildah)", b), nil
		}
		skipped = append(skipped, fmt.Sprintf("%s: %s", b, why))
	}
	return GoNative, "images: building with the Go-native builder (hack/ocibuild), no daemon needed (" + strings.Join(skipped, "; ") + ")", nil
}

// unusable says why builder b cannot build here, or "" when it can.
func unusable(ctx context.Context, r Runner, b Builder) string {
	if _, err := r.LookPath(string(b)); err != nil {
		return "not installed"
	}
	if b != Docker {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, dockerInfoTimeout)
	defer cancel()
	var stderr bytes.Buffer
	if err := r.Run(ctx, Command{Name: "docker", Args: []string{"info", "--format", "{{.ServerVersion}}"}}, io.Discard, &stderr); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if msg == "" {
			msg = err.Error()
		}
		return "no daemon answers docker info (" + msg + ")"
	}
	return ""
}

// DockerfileCommand is the command that builds r's Dockerfile with b
// (docker, podman or buildah; all take the same flags), from the
// repository root as the context.
func DockerfileCommand(b Builder, r Recipe, ref, version, revision string) Command {
	return Command{
		Name: string(b),
		Args: []string{"build", "-f", r.Dockerfile(), "--build-arg", "VERSION=" + version, "--build-arg", "REVISION=" + revision, "-t", ref, "."},
	}
}

// errNotLinux is the Go-native builder's answer on another OS: the device
// plugin's image needs a Linux host's glibc.
var errNotLinux = errors.New("the Go-native builder runs on Linux only (the device plugin's image takes glibc from the build host): use docker, podman or buildah")

// Config configures Run.
type Config struct {
	// Builder is the builder to use, or Auto.
	Builder Builder
	// Version tags the images and is stamped into the binaries.
	Version string
	// Revision is the commit, for the revision label.
	Revision string
	// Prefix comes before each image's name, e.g. "ghcr.io/acme/".
	Prefix string
	// Dir is the repository root (the Dockerfiles' context, where go build
	// runs).
	Dir string
	// Out receives the Go-native builder's layouts and archives, and its
	// binaries under Out/bin.
	Out string
	// Images names the recipes to build; empty: all.
	Images []string
	// Go is the go command.
	Go string
	// Runner runs the builders and go.
	Runner Runner
	// Stdout gets the summary, Stderr the builders' output.
	Stdout, Stderr io.Writer
}

// selected returns the recipes cfg.Images names, or all.
func (cfg Config) selected() ([]Recipe, error) {
	all := Recipes()
	if len(cfg.Images) == 0 {
		return all, nil
	}
	var out []Recipe
	for _, name := range cfg.Images {
		i := slices.IndexFunc(all, func(r Recipe) bool { return r.Name == name })
		if i < 0 {
			names := make([]string, len(all))
			for j, r := range all {
				names[j] = r.Name
			}
			return nil, fmt.Errorf("no image named %q (have %s)", name, strings.Join(names, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// Run builds the images cfg asks for with the builder Choose picks.
func Run(ctx context.Context, cfg Config) error {
	recipes, err := cfg.selected()
	if err != nil {
		return err
	}
	for _, r := range recipes {
		if _, err := r.Ref(cfg.Prefix, cfg.Version); err != nil {
			return err
		}
	}
	b, note, err := Choose(ctx, cfg.Runner, cfg.Builder)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintln(cfg.Stdout, note)
	if b != GoNative {
		for _, r := range recipes {
			ref, _ := r.Ref(cfg.Prefix, cfg.Version) // checked above
			c := DockerfileCommand(b, r, ref, cfg.Version, cfg.Revision)
			c.Dir = cfg.Dir
			_, _ = fmt.Fprintln(cfg.Stdout, c)
			if err := cfg.Runner.Run(ctx, c, cfg.Stderr, cfg.Stderr); err != nil {
				return fmt.Errorf("building %s with %s: %w", ref, b, err)
			}
		}
		return nil
	}
	if runtime.GOOS != "linux" {
		return errNotLinux
	}
	for _, r := range recipes {
		bin, err := GoBuild(ctx, cfg.Runner, cfg.Go, cfg.Dir, r, cfg.Version, filepath.Join(cfg.Out, "bin"), cfg.Stderr)
		if err != nil {
			return err
		}
		res, err := Pack(r, bin, PackOptions{Version: cfg.Version, Revision: cfg.Revision, Prefix: cfg.Prefix, Out: cfg.Out})
		if err != nil {
			return fmt.Errorf("packing %s: %w", r.Name, err)
		}
		_, _ = fmt.Fprintln(cfg.Stdout, res.describe())
	}
	_, _ = fmt.Fprintf(cfg.Stdout, "load one with: docker load -i %s  |  podman load -i %s  |  skopeo copy oci-archive:%s docker://REGISTRY/NAME:TAG\n",
		filepath.Join(cfg.Out, "NAME.tar"), filepath.Join(cfg.Out, "NAME.tar"), filepath.Join(cfg.Out, "NAME.tar"))
	return nil
}

// GoBuild compiles r's binary, stamped with version, into outDir (made if
// absent) by running goCmd in dir (the repository root), and returns its
// path. The build's output goes to stderr.
func GoBuild(ctx context.Context, run Runner, goCmd, dir string, r Recipe, version, outDir string, stderr io.Writer) (string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil { //nolint:gosec // G301: build outputs, like bin/
		return "", fmt.Errorf("creating %s: %w", outDir, err)
	}
	out, err := filepath.Abs(filepath.Join(outDir, r.Name))
	if err != nil {
		return "", fmt.Errorf("locating %s: %w", outDir, err)
	}
	if goCmd == "" {
		goCmd = "go"
	}
	c := Command{Dir: r.Dir(dir), Env: r.GoEnv(), Name: goCmd, Args: r.GoArgs(version, out)}
	if err := run.Run(ctx, c, stderr, stderr); err != nil {
		return "", fmt.Errorf("building %s (%s): %w", r.Name, c, err)
	}
	return out, nil
}
