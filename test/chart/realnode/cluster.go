package realnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/kubeclient"
	"github.com/gpushare/gpushare/test/chart"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/node"
)

// NodeName is the real node's name.
const NodeName = "gpushare-node"

// FakeGPUs are the node's simulated cards (devicePlugin.fakeGPUs).
const FakeGPUs = "2xTesla-T4:16GiB"

// fakeGPUCount is how many cards FakeGPUs makes.
const fakeGPUCount = 2

// Namespace is the release's namespace, as in docs/install.md.
const Namespace = "kube-system"

// ReleaseName is the release's name, as in docs/install.md.
const ReleaseName = "gpushare"

// HookDir is where the tests put the stub nvidia-cdi-hook on the host.
const HookDir = "/run/gpushare-realnode-hook"

// hostDirs are the host directories the chart's device plugin mounts with
// DirectoryOrCreate (values cdiDir and mpsRoot's parent), and HookDir,
// which teardown removes when the node made them.
var hostDirs = []string{"/run/cdi", "/var/run/cdi", "/run/gpushare", HookDir}

// Cluster is a control plane with one real node, gpushare's images
// imported into it.
type Cluster struct {
	CP     *framework.ControlPlane
	Node   *node.Node
	Images node.Images
	Client kubernetes.Interface
	// Root is the repository root.
	Root string
	// Dir holds the control plane and the processes' logs.
	Dir string
	// start is when Start began; Timings says how long each step took.
	Timings []Timing
}

// Timing is how long one step of Start took.
type Timing struct {
	Step     string
	Duration time.Duration
}

// Options configure Start.
type Options struct {
	// Dir holds the control plane and the processes' logs; required.
	Dir string
	// Purpose goes into the node lock, for whoever finds it taken.
	Purpose string
	// Out receives progress and the image builders' output.
	Out io.Writer
	// Runtime is the node's container runtime (node.Options.Runtime);
	// default node.DefaultRuntime of KubernetesVersion.
	Runtime node.Runtime
	// KubernetesVersion is the control plane's and the node's
	// (framework.KubernetesVersion or KubernetesVersionOldest); default
	// framework.KubernetesVersion.
	KubernetesVersion string
}

// Start builds what is missing (the host's packages, the Kubernetes
// binaries, the images), starts a control plane for nodes and the node,
// labelled gpushare=true as docs/install.md says, and waits until the node
// is Ready. On error what was started is stopped.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	logf := func(format string, args ...any) { _, _ = fmt.Fprintf(opts.Out, format+"\n", args...) }
	c := &Cluster{Dir: opts.Dir}
	step := func(name string, f func() error) error {
		start := time.Now()
		err := f()
		c.Timings = append(c.Timings, Timing{Step: name, Duration: time.Since(start)})
		logf("%s: %s", name, time.Since(start).Round(100*time.Millisecond))
		return err
	}
	version := opts.KubernetesVersion
	if version == "" {
		version = framework.KubernetesVersion
	}
	var err error
	if c.Root, err = chart.RepoRoot(); err != nil {
		return nil, err
	}
	if err := step("host packages", func() error { return node.EnsureHost(ctx, logf) }); err != nil {
		return nil, err
	}
	if err := step("kubernetes binaries", func() error {
		if _, err := framework.EnsureVersionBinaries(ctx, version, false); err != nil {
			return err
		}
		_, err := framework.EnsureNodeBinariesFor(ctx, version)
		return err
	}); err != nil {
		return nil, err
	}
	if err := step("images", func() error {
		c.Images, err = node.BuildImages(ctx, c.Root, version, opts.Out)
		return err
	}); err != nil {
		return nil, err
	}
	addr, err := node.HostAddress()
	if err != nil {
		return nil, err
	}
	if err := step("control plane", func() error {
		c.CP, err = framework.Start(ctx, framework.Options{
			Scheduler:         true,
			KubernetesVersion: version,
			Nodes:             &framework.NodeAccess{AdvertiseAddress: addr},
			Dir:               filepath.Join(opts.Dir, "controlplane"),
		})
		return err
	}); err != nil {
		return nil, err
	}
	logs := filepath.Join(opts.Dir, "node-logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		c.CP.Stop()
		return nil, fmt.Errorf("creating %s: %w", logs, err)
	}
	if err := step("node", func() error {
		c.Node, err = node.Start(ctx, node.Options{
			Runtime:           opts.Runtime,
			KubernetesVersion: version,
			Name:              NodeName,
			Labels:            map[string]string{"gpushare": "true"},
			Kubeconfig:        c.CP.AdminKubeconfig(),
			Address:           addr,
			Images:            c.Images.Archives,
			SandboxImage:      c.Images.Pause,
			HostDirs:          hostDirs,
			LogsDir:           logs,
			Purpose:           opts.Purpose,
			Logf:              logf,
		})
		return err
	}); err != nil {
		c.CP.Stop()
		return nil, err
	}
	if c.Client, err = kubeclient.New(c.CP.AdminKubeconfig(), 50, 100, "gpushare-realnode-test"); err != nil {
		return nil, errors.Join(err, c.Stop())
	}
	return c, nil
}

// Stop tears the node down and stops the control plane.
func (c *Cluster) Stop() error {
	var err error
	if c.Node != nil {
		err = c.Node.Stop()
	}
	if c.CP != nil {
		c.CP.Stop()
	}
	return err
}
