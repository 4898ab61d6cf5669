package image

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const (
	// VersionVariable is the linker variable stamped with the version
	// (go build -ldflags "-X VersionVariable=VERSION"), as `make build` does.
	VersionVariable = "github.com/gpushare/gpushare/pkg/version.Version"
	// SourceURL is the org.opencontainers.image.source label.
	SourceURL = "https://github.com/gpushare/gpushare"
	// BinDir holds each image's binary; it is also on the images' PATH.
	BinDir = "/usr/local/bin"
	// NonRootUser is "UID:GID" of the user the extender and the kubectl
	// plugin run as: distroless's "nonroot". Numeric, because kubelet can
	// enforce runAsNonRoot only on a numeric user.
	NonRootUser = "65532:65532"
	// RootUser is the device plugin's: it serves its socket in, and dials
	// kubelet.sock from, kubelet's device-plugins directory, which belongs
	// to root and which no one else may write; NVML opens /dev/nvidia*.
	RootUser = "0:0"
	// ImagePath is every image's PATH.
	ImagePath = "PATH=/usr/local/bin:/usr/bin:/bin"
)

// Recipe says how one binary is built and packed. build/<dir>.Dockerfile
// says the same for docker, podman and buildah; TestDockerfilesAgree keeps
// the two in step.
type Recipe struct {
	// Name names the binary and the image (before the prefix and tag).
	Name string
	// Module is the directory of the Go module that holds Package,
	// relative to the repository root; empty: the root module. go build
	// runs there.
	Module string
	// Package is the Go main package, relative to Module.
	Package string
	// Description is the org.opencontainers.image.description label.
	Description string
	// CGO builds with cgo, dynamically linked against glibc. Only the device
	// plugin needs it: go-nvml calls libnvidia-ml.so.1, which it dlopen()s,
	// through cgo. The others are static (CGO_ENABLED=0) and need no libc.
	CGO bool
	// User is "UID:GID" (NonRootUser or RootUser).
	User string
	// Env is the image's environment besides PATH.
	Env []string
}

// Recipes are the four images: the three of `make build`, in its order,
// then the DRA driver, which lives in its own module (dra/).
func Recipes() []Recipe {
	return []Recipe{
		{
			Name:        "gpushare-scheduler-extender",
			Package:     "./extender",
			Description: "gpushare kube-scheduler extender: places pods asking aliyun.com/gpu-mem on single GPU cards",
			User:        NonRootUser,
		},
		{
			Name:        "kubectl-inspect-gpushare",
			Package:     "./kubectl-inspect-gpushare",
			Description: "kubectl inspect gpushare: the GPU memory allocated on every card of every GPU-sharing node",
			User:        NonRootUser,
		},
		{
			Name:        "gpushare-device-plugin",
			Package:     "./deviceplugin",
			Description: "gpushare device plugin: advertises GPU memory to kubelet as aliyun.com/gpu-mem",
			CGO:         true,
			User:        RootUser,
			// The NVIDIA container runtime mounts the driver's libraries
			// (libnvidia-ml.so.1: "utility"; nvidia-cuda-mps-control and
			// -server, which mps isolation runs: "compute") and every
			// card's device node into a container that asks for them; the
			// plugin needs all cards. The DaemonSet sets the same,
			// explicitly.
			Env: []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"},
		},
		{
			Name:        "gpushare-dra-driver",
			Module:      "dra",
			Package:     "./cmd/gpushare-dra-driver",
			Description: "gpushare DRA driver: publishes GPUs with consumable memory capacity and prepares the claims allocated on them",
			// As the device plugin: NVML through cgo; root for kubelet's
			// plugin registry and CDI directory; the driver's libraries,
			// MPS programs and every card from the NVIDIA runtime.
			CGO:  true,
			User: RootUser,
			Env:  []string{"NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"},
		},
	}
}

// Dir is the directory go build runs in: Module under the repository
// root.
func (r Recipe) Dir(root string) string { return filepath.Join(root, filepath.FromSlash(r.Module)) }

// Binary is the binary's path in the image.
func (r Recipe) Binary() string { return path.Join(BinDir, r.Name) }

// Entrypoint is the image's entrypoint: the binary, exec form (the images
// have no shell).
func (r Recipe) Entrypoint() []string { return []string{r.Binary()} }

// Dockerfile is the recipe's Dockerfile, relative to the repository root:
// build/<the package's last element>.Dockerfile.
func (r Recipe) Dockerfile() string {
	return "build/" + path.Base(r.Package) + ".Dockerfile"
}

// Labels are the image's OCI labels.
func (r Recipe) Labels(version, revision string) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       r.Name,
		"org.opencontainers.image.description": r.Description,
		"org.opencontainers.image.source":      SourceURL,
		"org.opencontainers.image.version":     version,
		"org.opencontainers.image.revision":    revision,
	}
}

// RuntimeConfig is the image config's runtime part.
func (r Recipe) RuntimeConfig(version, revision string) v1.Config {
	return v1.Config{
		User:       r.User,
		Env:        append([]string{ImagePath}, r.Env...),
		Entrypoint: r.Entrypoint(),
		WorkingDir: "/",
		Labels:     r.Labels(version, revision),
	}
}

// GoEnv is the environment go build runs with, besides the caller's.
func (r Recipe) GoEnv() []string {
	if r.CGO {
		return []string{"CGO_ENABLED=1"}
	}
	return []string{"CGO_ENABLED=0"}
}

// GoArgs are go build's arguments writing the binary to out. -trimpath
// and -buildvcs=false keep build paths and the checkout's state out of
// the binary, so the same source gives the same binary in a container
// build (no .git in the context) and here; the version is stamped with
// -X and the revision goes in a label. -s -w drop the symbol table and
// DWARF (about a third of the size); panics still print stack traces.
// `make build` keeps them, for debugging.
func (r Recipe) GoArgs(version, out string) []string {
	return []string{"build", "-trimpath", "-buildvcs=false", "-ldflags", "-s -w -X " + VersionVariable + "=" + version, "-o", out, r.Package}
}

// tagPattern is a valid image tag (the distribution spec's rule).
var tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Ref is the image reference PREFIX+NAME:VERSION, e.g.
// "ghcr.io/acme/gpushare-device-plugin:v1.2.0" with prefix "ghcr.io/acme/".
func (r Recipe) Ref(prefix, version string) (string, error) {
	if !tagPattern.MatchString(version) {
		return "", fmt.Errorf("version %q is not a valid image tag (letters, digits, '_', '.', '-'; at most 128; not starting with '.' or '-'): set VERSION", version)
	}
	return prefix + r.Name + ":" + version, nil
}
