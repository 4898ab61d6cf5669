package node

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/kubeclient"
	"github.com/gpushare/gpushare/pkg/version"
	"github.com/gpushare/gpushare/test/integration/framework"
)

// Timeouts of the node's start-up steps.
const (
	containerdTimeout = 60 * time.Second
	kubeletTimeout    = 120 * time.Second
	proxyTimeout      = 60 * time.Second
	stopGrace         = 15 * time.Second
	// criTeardownTimeout bounds removing every sandbox at teardown.
	criTeardownTimeout = 2 * time.Minute
)

// Runtime is the container runtime a node runs.
type Runtime string

// The runtimes.
const (
	// Containerd16 is containerd 1.6 and runc from Debian (apt-get): quick
	// to set up; it ignores CDI devices.
	Containerd16 Runtime = "containerd-1.6"
	// Containerd2 is containerd framework.ContainerdVersion built from its
	// Go module (framework.EnsureContainerdBinaries), with Debian's runc:
	// it applies CDI devices.
	Containerd2 Runtime = "containerd-2"
)

// ParseRuntime checks a runtime's name.
func ParseRuntime(s string) (Runtime, error) {
	switch r := Runtime(s); r {
	case Containerd16, Containerd2:
		return r, nil
	}
	return "", fmt.Errorf("runtime %q: want %s or %s", s, Containerd16, Containerd2)
}

// Options configure Start.
type Options struct {
	// Runtime is the container runtime; default DefaultRuntime of
	// KubernetesVersion.
	Runtime Runtime
	// KubernetesVersion is kubelet's and kube-proxy's, the control
	// plane's (framework.EnsureNodeBinariesFor); default
	// framework.KubernetesVersion. kubelet 1.36 and later need Containerd2.
	KubernetesVersion string
	// Name is the node's name; default "gpushare-node".
	Name string
	// Labels are the node's labels (kubelet --node-labels).
	Labels map[string]string
	// Kubeconfig is the control plane's admin kubeconfig (kubelet and
	// kube-proxy use it).
	Kubeconfig string
	// Address is the node's address (kubelet --node-ip); default
	// HostAddress().
	Address string
	// Images are image archives (OCI or docker) imported into the CRI's
	// containerd namespace before kubelet starts (Images.Archives).
	Images []string
	// SandboxImage is the pause image's reference, one of Images.
	SandboxImage string
	// HostDirs are host directories that pods on the node may create
	// (hostPath DirectoryOrCreate), removed at teardown when they did not
	// exist before the node ran.
	HostDirs []string
	// LogsDir receives containerd.log, kubelet.log and kube-proxy.log;
	// required. It is not under DataDir: teardown keeps it.
	LogsDir string
	// Purpose is written into the lock (LockPath), for whoever finds it
	// taken, e.g. "go test ./realnode (TestHelmInstall)".
	Purpose string
	// Logf receives progress lines; default none.
	Logf func(format string, args ...any)
}

// Node is a running node: containerd, kube-proxy and kubelet.
type Node struct {
	opts   Options
	lay    layout
	bins   framework.NodeBinaries
	lock   *Lock
	client kubernetes.Interface
	// rt are the runtime's programs.
	rt runtimeBins

	mu         sync.Mutex
	containerd *framework.Proc
	kubelet    *framework.Proc
	proxy      *framework.Proc
	stopOnce   sync.Once
	stopErr    error
}

// Start takes the node lock, tears down whatever a node that was not
// stopped left, prepares the machine (sysctls, directories, configuration
// files), starts containerd, imports the images, starts kubelet, waits
// until the Node is Ready, and starts kube-proxy. On error everything
// started is torn down again.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.Name == "" {
		opts.Name = "gpushare-node"
	}
	if opts.KubernetesVersion == "" {
		opts.KubernetesVersion = framework.KubernetesVersion
	}
	if opts.Runtime == "" {
		r, err := DefaultRuntime(opts.KubernetesVersion)
		if err != nil {
			return nil, err
		}
		opts.Runtime = r
	}
	if _, err := ParseRuntime(string(opts.Runtime)); err != nil {
		return nil, err
	}
	if err := runtimeFits(opts.Runtime, opts.KubernetesVersion); err != nil {
		return nil, err
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.Kubeconfig == "" || opts.LogsDir == "" || opts.SandboxImage == "" {
		return nil, errors.New("starting the node: Options.Kubeconfig, LogsDir and SandboxImage are required")
	}
	if err := EnsureHost(ctx, opts.Logf); err != nil {
		return nil, err
	}
	if opts.Address == "" {
		a, err := HostAddress()
		if err != nil {
			return nil, err
		}
		opts.Address = a
	}
	bins, err := framework.EnsureNodeBinariesFor(ctx, opts.KubernetesVersion)
	if err != nil {
		return nil, err
	}
	lock, err := TakeLock(ctx, opts.Purpose, opts.Logf)
	if err != nil {
		return nil, err
	}
	n := &Node{opts: opts, lay: layout{data: DataDir}, bins: bins, lock: lock}
	if err := n.teardown(ctx, "leftovers of an earlier node"); err != nil {
		lock.Release()
		return nil, fmt.Errorf("cleaning up after an earlier node: %w", err)
	}
	if n.rt, err = findRuntime(ctx, opts.Runtime); err != nil {
		lock.Release()
		return nil, err
	}
	if n.client, err = kubeclient.New(opts.Kubeconfig, 50, 100, "gpushare-test-node"); err != nil {
		lock.Release()
		return nil, err
	}
	if err := n.start(ctx); err != nil {
		stopErr := n.Stop()
		return nil, errors.Join(err, stopErr)
	}
	return n, nil
}

// start does Start's work after the lock and the cleanup.
func (n *Node) start(ctx context.Context) error {
	st, err := loadHostState()
	if err != nil {
		return err
	}
	st.Runtime = n.opts.Runtime
	if err := st.save(); err != nil {
		return err
	}
	if err := st.noteCreated(&st.Created, append([]string{KubeletDir}, n.opts.HostDirs...)...); err != nil {
		return err
	}
	if err := st.noteCreated(&st.CreatedShared, containerLogLinks, "/run/containerd"); err != nil {
		return err
	}
	if !st.ChainsRecorded {
		st.KubeChains, st.ChainsRecorded = kubeChains(ctx), true
		if err := st.save(); err != nil {
			return err
		}
	}
	if err := st.applySysctls(); err != nil {
		return err
	}
	if err := n.writeConfig(); err != nil {
		return err
	}
	if err := n.startContainerd(ctx); err != nil {
		return err
	}
	for _, img := range n.opts.Images {
		if err := n.importImage(ctx, img); err != nil {
			return err
		}
	}
	if err := n.startKubelet(ctx); err != nil {
		return err
	}
	if err := n.waitNodeReady(ctx); err != nil {
		return err
	}
	// kube-proxy after the Node has its addresses: from v1.35 one that
	// started before sees the node's IPs change and exits ("NodeIPs
	// changed for the node"), leaving Service traffic from the host (the
	// API server's calls to webhooks, kube-scheduler's to the extender)
	// undirected.
	return n.startProxy(ctx)
}

// writeConfig writes containerd's, CNI's, kubelet's and kube-proxy's
// configuration under the layout.
func (n *Node) writeConfig() error {
	for _, d := range []string{n.lay.cniConfDir(), n.lay.cniIPAMDir(), n.lay.podLogsDir(), n.lay.volumePlugins(), n.lay.runcRoot()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	containerdConfig := n.lay.containerdConfigTOML(n.opts.SandboxImage)
	if n.opts.Runtime == Containerd2 {
		containerdConfig = n.lay.containerd2ConfigTOML(n.opts.SandboxImage, n.rt.shim)
	}
	files := map[string]string{
		n.lay.containerdConfig(): containerdConfig,
		n.lay.cniConfFile():      n.lay.cniConflist(),
		n.lay.kubeletConfig():    n.lay.kubeletConfigYAML(n.opts.Address),
		n.lay.proxyConfig():      n.lay.proxyConfigYAML(n.opts.Kubeconfig, n.opts.Name),
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil { //nolint:gosec // G306: configuration, no secrets
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// startContainerd starts containerd with the layout's configuration and
// waits until its CRI is ready.
func (n *Node) startContainerd(ctx context.Context) error {
	p, err := framework.StartProc("containerd", n.rt.containerd, []string{"--config", n.lay.containerdConfig()},
		filepath.Join(n.opts.LogsDir, "containerd.log"))
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.containerd = p
	n.mu.Unlock()
	c, err := dialCRI(n.lay.containerdSocket())
	if err != nil {
		return err
	}
	defer c.close()
	ctx, cancel := context.WithTimeout(ctx, containerdTimeout)
	defer cancel()
	return c.waitReady(ctx, exitedErr(p))
}

// exitedErr returns a check that fails once p has exited.
func exitedErr(p *framework.Proc) func() error {
	return func() error {
		if p.Exited() {
			return p.ExitError()
		}
		return nil
	}
}

// importImage imports an image archive into the CRI's namespace with ctr
// and unpacks it for the overlayfs snapshotter.
func (n *Node) importImage(ctx context.Context, archive string) error {
	out, err := exec.CommandContext(ctx, n.rt.ctr, "--address", n.lay.containerdSocket(), "--namespace", CRINamespace, //nolint:gosec // G204: the runtime's ctr
		"images", "import", archive).CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing %s into the node's containerd: %w: %s", archive, err, strings.TrimSpace(string(out)))
	}
	n.opts.Logf("imported %s: %s", filepath.Base(archive), strings.TrimSpace(lastLines(string(out), 1)))
	return nil
}

// ImportImage imports one more image archive into the running node.
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	return n.importImage(ctx, archive)
}

// startProxy starts kube-proxy and waits until it answers /livez.
func (n *Node) startProxy(ctx context.Context) error {
	p, err := framework.StartProc("kube-proxy", n.bins.Proxy, []string{"--config=" + n.lay.proxyConfig(), "--v=2"},
		filepath.Join(n.opts.LogsDir, "kube-proxy.log"))
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.proxy = p
	n.mu.Unlock()
	return waitHTTP(ctx, p, proxyTimeout, "http://"+proxyHealthzAddr+"/livez")
}

// kubeletArgs are kubelet's flags besides its configuration file.
func (n *Node) kubeletArgs() []string {
	args := []string{
		"--config=" + n.lay.kubeletConfig(),
		"--kubeconfig=" + n.opts.Kubeconfig,
		"--root-dir=" + KubeletDir,
		"--hostname-override=" + n.opts.Name,
		"--node-ip=" + n.opts.Address,
		"--v=2",
	}
	if len(n.opts.Labels) > 0 {
		args = append(args, "--node-labels="+nodeLabels(n.opts.Labels))
	}
	return args
}

// startKubelet starts kubelet and waits until it answers /healthz.
func (n *Node) startKubelet(ctx context.Context) error {
	p, err := framework.StartProc("kubelet", n.bins.Kubelet, n.kubeletArgs(), filepath.Join(n.opts.LogsDir, "kubelet.log"))
	if err != nil {
		return err
	}
	n.mu.Lock()
	n.kubelet = p
	n.mu.Unlock()
	return waitHTTP(ctx, p, kubeletTimeout, kubeletHealthz)
}

// waitHTTP polls url until it answers 200, failing early when p exits.
func waitHTTP(ctx context.Context, p *framework.Proc, timeout time.Duration, url string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	last := "no answer yet"
	for {
		if p.Exited() {
			return fmt.Errorf("waiting for %s: %w", p.Name, p.ExitError())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", p.Name, err)
		}
		if resp, err := client.Do(req); err != nil {
			last = err.Error()
		} else {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s at %s: %w (last: %s); last lines of %s:\n%s", p.Name, url, ctx.Err(), last, p.LogPath, framework.Tail(p.LogPath, 30))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitNodeReady waits until the Node object is Ready.
func (n *Node) waitNodeReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, kubeletTimeout)
	defer cancel()
	last := "not registered"
	for {
		n.mu.Lock()
		k := n.kubelet
		n.mu.Unlock()
		if k.Exited() {
			return fmt.Errorf("waiting for node %s to be Ready: %w", n.opts.Name, k.ExitError())
		}
		node, err := n.client.CoreV1().Nodes().Get(ctx, n.opts.Name, metav1.GetOptions{})
		if err == nil {
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = c.Reason + ": " + c.Message
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for node %s to be Ready: %w (last: %s); last lines of %s:\n%s", n.opts.Name, ctx.Err(), last, k.LogPath, framework.Tail(k.LogPath, 30))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Runtime is the node's container runtime.
func (n *Node) Runtime() Runtime { return n.opts.Runtime }

// Name is the node's name.
func (n *Node) Name() string { return n.opts.Name }

// Address is the node's address.
func (n *Node) Address() string { return n.opts.Address }

// PodLogsDir is where kubelet has containerd write the containers' logs.
func (n *Node) PodLogsDir() string { return n.lay.podLogsDir() }

// LogsDir is Options.LogsDir.
func (n *Node) LogsDir() string { return n.opts.LogsDir }

// CRISocket is containerd's socket (kubelet's runtime endpoint).
func (n *Node) CRISocket() string { return n.lay.containerdSocket() }

// Exited returns how each of the node's processes that has ended did
// (none while all run).
func (n *Node) Exited() []error {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []error
	for _, p := range []*framework.Proc{n.containerd, n.proxy, n.kubelet} {
		if p != nil && p.Exited() {
			out = append(out, p.ExitError())
		}
	}
	return out
}

// PIDs maps the node's processes' names to their ids.
func (n *Node) PIDs() map[string]int {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := map[string]int{}
	for _, p := range []*framework.Proc{n.containerd, n.proxy, n.kubelet} {
		if p != nil && !p.Exited() {
			out[p.Name] = p.PID()
		}
	}
	return out
}

// Stop tears the node down (see the package comment) and releases the
// lock. It may be called more than once; later calls return the first
// call's result.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		n.stopErr = n.teardown(ctx, "node stop")
		n.lock.Release()
	})
	return n.stopErr
}

// teardown removes every trace of the node (the package comment lists
// them). It runs at Stop and, before a start, on what an earlier node
// left. A containerd with pods is started again (when its configuration
// is there) to remove them through the CRI.
func (n *Node) teardown(ctx context.Context, why string) error {
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	n.mu.Lock()
	kubelet, proxy, containerd := n.kubelet, n.proxy, n.containerd
	n.kubelet, n.proxy, n.containerd = nil, nil, nil
	n.mu.Unlock()
	for _, p := range []*framework.Proc{kubelet, proxy} {
		if p != nil {
			p.Stop(stopGrace)
		}
	}
	_, cfgErr := os.Stat(n.lay.containerdConfig())
	if containerd == nil && cfgErr == nil && (len(runcContainers(n.runcNamespaceRoot())) > 0 || len(shimsOf(n.lay.containerdSocket())) > 0 || dirNotEmpty(n.lay.containerdRoot())) {
		// An earlier node's containerd: start it again to remove its pods.
		n.opts.Logf("teardown (%s): starting containerd again to remove its pods", why)
		earlier, err := loadHostState()
		if err == nil {
			n.rt, err = findRuntime(ctx, earlier.Runtime)
		}
		if err == nil {
			err = n.startContainerd(ctx)
		}
		if err != nil {
			note(fmt.Errorf("starting the earlier node's containerd to clean up: %w", err))
		}
		n.mu.Lock()
		containerd, n.containerd = n.containerd, nil
		n.mu.Unlock()
	}
	if containerd != nil && !containerd.Exited() {
		if c, err := dialCRI(n.lay.containerdSocket()); err == nil {
			cctx, cancel := context.WithTimeout(ctx, criTeardownTimeout)
			removed, err := c.removeAllSandboxes(cctx)
			cancel()
			c.close()
			note(err)
			if removed > 0 {
				n.opts.Logf("teardown (%s): removed %d pod sandboxes", why, removed)
			}
		}
		containerd.Stop(stopGrace)
	}
	if k, err := killShims(n.lay.containerdSocket()); err != nil || k > 0 {
		note(err)
		n.opts.Logf("teardown (%s): killed %d containerd shims", why, k)
	}
	if k, err := runcDeleteAll(ctx, n.runcNamespaceRoot()); err != nil || k > 0 {
		note(err)
		n.opts.Logf("teardown (%s): force-deleted %d runc containers", why, k)
	}
	if _, err := os.Stat(n.bins.Proxy); err == nil {
		if out, err := exec.CommandContext(ctx, n.bins.Proxy, "--cleanup").CombinedOutput(); err != nil {
			note(fmt.Errorf("kube-proxy --cleanup: %w: %s", err, lastLines(string(out), 10)))
		}
	}
	note(deleteLink(ctx, BridgeName))
	note(removeCgroups())
	note(removeLogLinks(n.lay.podLogsDir()))
	note(unmountUnder(KubeletDir))
	note(unmountUnder(DataDir))
	st, err := loadHostState()
	note(err)
	if st.ChainsRecorded {
		// kubelet's chains (kube-proxy --cleanup removed its own).
		note(removeKubeChains(ctx, st.KubeChains))
	}
	note(st.restoreSysctls())
	for _, d := range st.Created {
		note(removeTree(d))
	}
	for _, d := range st.CreatedShared {
		removeEmptyDirs(d)
	}
	if len(errs) > 0 {
		// Keep DataDir (and the host state in it) for another try.
		return fmt.Errorf("tearing the node down (%s): %w", why, errors.Join(errs...))
	}
	return removeTree(DataDir)
}

// Cleanup tears down what a node that was not stopped left on this
// machine (its supervising process died), as Start does before it starts
// one. It fails with ErrLocked while another process runs a node.
func Cleanup(ctx context.Context, logf func(format string, args ...any)) error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	lock, err := TakeLock(ctx, "cleaning up after a node", logf)
	if err != nil {
		return err
	}
	defer lock.Release()
	// kube-proxy --cleanup needs the binary; without it its rules stay.
	bins, _ := framework.EnsureNodeBinaries(ctx)
	// A containerd started again to remove its pods logs into DataDir,
	// which goes with the rest.
	n := &Node{opts: Options{Logf: logf, LogsDir: DataDir}, lay: layout{data: DataDir}, bins: bins, lock: lock}
	return n.teardown(ctx, "cleanup")
}

// DefaultRuntime is the runtime a node of kubelet kubeVersion gets
// unless told otherwise: Containerd2 from kubelet 1.36 (1.35 is the last to
// support containerd 1.x), else Containerd16, the quicker to set up.
func DefaultRuntime(kubeVersion string) (Runtime, error) {
	minor, err := version.KubernetesMinor(kubeVersion)
	if err != nil {
		return "", fmt.Errorf("choosing the node's runtime: %w", err)
	}
	if needsContainerd2(minor) {
		return Containerd2, nil
	}
	return Containerd16, nil
}

// needsContainerd2 reports whether kubelet 1.minor runs only on
// containerd 2: 1.35 is the last to support containerd 1.x.
func needsContainerd2(minor int) bool { return minor > 35 }

// runtimeFits refuses a runtime kubelet of kubeVersion does not run with:
// kubelet 1.35 is the last to support containerd 1.x.
func runtimeFits(r Runtime, kubeVersion string) error {
	minor, err := version.KubernetesMinor(kubeVersion)
	if err != nil {
		return fmt.Errorf("starting the node: %w", err)
	}
	if needsContainerd2(minor) && r != Containerd2 {
		return fmt.Errorf("starting the node: kubelet %s needs containerd 2 (runtime %s; kubelet 1.35 is the last to support containerd 1.x)", kubeVersion, Containerd2)
	}
	return nil
}

// runtimeBins are a runtime's programs.
type runtimeBins struct {
	containerd, shim, ctr string
}

// findRuntime finds runtime r's programs: Debian's on PATH, or those built
// from test/tools/containerd (building them when missing). The empty
// runtime is Containerd16 (a host state from before runtimes were
// recorded).
func findRuntime(ctx context.Context, r Runtime) (runtimeBins, error) {
	if r == Containerd2 {
		b, err := framework.EnsureContainerdBinaries(ctx)
		return runtimeBins{containerd: b.Containerd, shim: b.Shim, ctr: b.Ctr}, err
	}
	var rt runtimeBins
	for _, f := range []struct {
		name string
		path *string
	}{{"containerd", &rt.containerd}, {"containerd-shim-runc-v2", &rt.shim}, {"ctr", &rt.ctr}} {
		p, err := exec.LookPath(f.name)
		if err != nil {
			return rt, fmt.Errorf("finding containerd 1.6's %s: %w", f.name, err)
		}
		*f.path = p
	}
	return rt, nil
}

// runcNamespaceRoot is runc's state directory for the CRI's containers.
func (n *Node) runcNamespaceRoot() string { return filepath.Join(n.lay.runcRoot(), CRINamespace) }

// dirNotEmpty reports whether dir exists and has entries.
func dirNotEmpty(dir string) bool {
	entries, err := os.ReadDir(dir)
	return err == nil && len(entries) > 0
}

// RestartKubelet stops kubelet (SIGKILL when kill, else SIGTERM) and
// starts it again with the same flags, waiting until it is healthy.
func (n *Node) RestartKubelet(ctx context.Context, kill bool) error {
	n.mu.Lock()
	p := n.kubelet
	n.mu.Unlock()
	stopProc(p, kill)
	return n.startKubelet(ctx)
}

// RestartContainerd stops containerd (SIGKILL when kill, else SIGTERM; its
// shims and containers keep running) and starts it again, waiting until
// its CRI is ready.
func (n *Node) RestartContainerd(ctx context.Context, kill bool) error {
	n.mu.Lock()
	p := n.containerd
	n.mu.Unlock()
	stopProc(p, kill)
	return n.startContainerd(ctx)
}

func stopProc(p *framework.Proc, kill bool) {
	if p == nil {
		return
	}
	if kill {
		p.Kill()
		return
	}
	p.Stop(stopGrace)
}

// KillContainers SIGKILLs the init process of every container on the
// node, pause containers included, as an OOM killer or a crash would, and
// returns how many it killed. kubelet restarts them.
func (n *Node) KillContainers(ctx context.Context) (int, error) {
	killed := 0
	var errs []error
	for _, id := range runcContainers(n.runcNamespaceRoot()) {
		out, err := exec.CommandContext(ctx, "runc", "--root", n.runcNamespaceRoot(), "kill", id, "KILL").CombinedOutput()
		if err != nil {
			// Gone already: it exited, or containerd removed it meanwhile.
			if strings.Contains(string(out), "not running") || strings.Contains(string(out), "does not exist") || strings.Contains(string(out), "container not found") {
				continue
			}
			errs = append(errs, fmt.Errorf("runc kill %s: %w: %s", id, err, strings.TrimSpace(string(out))))
			continue
		}
		killed++
	}
	return killed, errors.Join(errs...)
}

// SignalKubelet sends sig to kubelet's process.
func (n *Node) SignalKubelet(sig syscall.Signal) error {
	n.mu.Lock()
	p := n.kubelet
	n.mu.Unlock()
	if p == nil {
		return errors.New("signalling kubelet: it does not run")
	}
	return p.Signal(sig)
}
