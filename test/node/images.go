package node

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/gpushare/gpushare/pkg/build/image"
	"github.com/gpushare/gpushare/test/integration/framework"
)

// The references of the images BuildImages makes. Ours carry a registry
// name that no pull can reach, so an image that was not imported fails
// loudly instead of being fetched from elsewhere.
const (
	// ImageRegistry is the prefix of gpushare's images (the chart's
	// image.registry) and of the test images.
	ImageRegistry = "gpushare.test/"
	// ImageTag tags gpushare's images (the chart's image.*.tag) and the
	// test images.
	ImageTag = "realnode"
	// SchedulerRegistry and the cluster's Kubernetes version name the
	// kube-scheduler image the chart's second-scheduler topology runs by
	// default (scheduler.image).
	SchedulerRegistry = "registry.k8s.io/"
)

// Images are the image archives BuildImages wrote and the references in
// them.
type Images struct {
	// Archives are every image's archive, for Options.Images.
	Archives []string
	// Pause is the sandbox image (Options.SandboxImage), Probe the GPU
	// test pods' image (test/images/gpuprobe), Scheduler kube-scheduler's.
	Pause, Probe, Scheduler string
	// CDIHook is the test-only stub nvidia-cdi-hook (test/images/cdihook),
	// a binary for the host, not an image.
	CDIHook string
}

// testRecipes are the test images built from this repository: static
// binaries, run as root (the probe reports its user; a pod may set
// another).
func testRecipes() []image.Recipe {
	return []image.Recipe{
		{Name: "pause", Package: "./test/images/pause", User: image.RootUser,
			Description: "test-only pod sandbox image of the real-node tests: waits for SIGTERM"},
		{Name: "gpuprobe", Package: "./test/images/gpuprobe", User: image.RootUser,
			Description: "test-only GPU pod image of the real-node tests: prints its user, environment and mounts, then waits"},
	}
}

// BuildImages builds the images a real node runs: gpushare's three with
// `make images` (the Go-native builder, ImageRegistry and ImageTag, into
// <root>/_output/images), the test images (testRecipes) and a
// kube-scheduler image of the control plane's binary (Kubernetes version),
// with its shared libraries from this machine, into
// <root>/_output/node-images, with the stub nvidia-cdi-hook for the host.
// Builders' output goes to w.
func BuildImages(ctx context.Context, root, version string, w io.Writer) (Images, error) {
	cmd := exec.CommandContext(ctx, "make", "images", "IMAGE_BUILDER=go", "IMAGE_PREFIX="+ImageRegistry, "VERSION="+ImageTag)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return Images{}, fmt.Errorf("make images (in %s): %w", root, err)
	}
	var imgs Images
	for _, r := range image.Recipes() {
		imgs.Archives = append(imgs.Archives, filepath.Join(root, "_output", "images", r.Name+".tar"))
	}
	out := filepath.Join(root, "_output", "node-images")
	var err error
	for _, r := range testRecipes() {
		bin, err := image.GoBuild(ctx, image.ExecRunner{}, "go", root, r, ImageTag, filepath.Join(out, "bin"), w)
		if err != nil {
			return Images{}, err
		}
		res, err := image.Pack(r, bin, image.PackOptions{Version: ImageTag, Revision: "test", Prefix: ImageRegistry, Out: out})
		if err != nil {
			return Images{}, fmt.Errorf("packing %s: %w", r.Name, err)
		}
		imgs.Archives = append(imgs.Archives, res.Archive)
		switch r.Name {
		case "pause":
			imgs.Pause = res.Ref
		case "gpuprobe":
			imgs.Probe = res.Ref
		}
	}
	hook := image.Recipe{Name: "nvidia-cdi-hook", Package: "./test/images/cdihook"}
	if imgs.CDIHook, err = image.GoBuild(ctx, image.ExecRunner{}, "go", root, hook, ImageTag, filepath.Join(out, "bin"), w); err != nil {
		return Images{}, err
	}
	bins, err := framework.EnsureVersionBinaries(ctx, version, false)
	if err != nil {
		return Images{}, err
	}
	sched := image.Recipe{
		Name: "kube-scheduler", Package: "k8s.io/kubernetes/cmd/kube-scheduler", CGO: true, User: image.NonRootUser,
		Description: "test-only: kube-scheduler " + version + " as the integration tests build it, for the chart's second-scheduler topology",
	}
	res, err := image.Pack(sched, bins.Scheduler, image.PackOptions{Version: version, Revision: "test", Prefix: SchedulerRegistry, Out: out})
	if err != nil {
		return Images{}, fmt.Errorf("packing kube-scheduler: %w", err)
	}
	imgs.Archives = append(imgs.Archives, res.Archive)
	imgs.Scheduler = res.Ref
	for _, a := range imgs.Archives {
		if _, err := os.Stat(a); err != nil {
			return Images{}, fmt.Errorf("building the node's images: %w", err)
		}
	}
	return imgs, nil
}
