package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/leader"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/kubelet/nodeagent"
)

// Service accounts of manifests/extender/rbac.yaml and manifests/deviceplugin/rbac.yaml.
const (
	systemNamespace     = "kube-system"
	extenderAccount     = "gpushare-scheduler-extender"
	devicePluginAccount = "gpushare-device-plugin"
	// pluginPodPrefix+NODE is the pod each node's device plugin token is
	// bound to, in systemNamespace: the DaemonSet's pod in a real cluster.
	pluginPodPrefix = "gpushare-device-plugin-"
	// extenderPrefix is where the extender serves its verbs (extender.Prefix).
	extenderPrefix = "/gpushare-scheduler"
	// maxSocketPath is the longest unix socket path Linux accepts.
	maxSocketPath = 107
)

// NodeSpec is one simulated GPU node.
type NodeSpec struct {
	Name string
	// FakeGPUs is the device plugin's --fake-gpus, e.g. "4xTesla-T4:16GiB".
	FakeGPUs string
	// FakeDriver is the device plugin's --fake-driver, e.g. "615.00";
	// empty: the node enforces no memory limits.
	FakeDriver string
	// Address is the node's InternalIP.
	Address string
}

// nodeKinds are the cards of DefaultNodes, in turn.
var nodeKinds = []struct{ prefix, gpus, driver string }{
	{"t4", "4xTesla-T4:16GiB", ""},
	{"a100", "2xA100-SXM4-80GB:80GiB", "615.00"},
	{"v100", "8xTesla-V100-SXM2:32GiB", ""},
}

// DefaultNodes returns n nodes cycling through 4×T4 16 GiB, 2×A100 80 GiB
// and 8×V100 32 GiB, named t4-1, a100-1, v100-1, t4-2, …, with addresses
// 10.0.0.11, 10.0.0.12, …. The A100 nodes' fake driver is R615, so their
// plugin enforces memory limits in driver mode; the others enforce none.
func DefaultNodes(n int) []NodeSpec {
	out := make([]NodeSpec, 0, n)
	for i := range n {
		k := nodeKinds[i%len(nodeKinds)]
		out = append(out, NodeSpec{
			Name:       fmt.Sprintf("%s-%d", k.prefix, i/len(nodeKinds)+1),
			FakeGPUs:   k.gpus,
			FakeDriver: k.driver,
			Address:    fmt.Sprintf("10.0.%d.%d", i/200, 11+i%200),
		})
	}
	return out
}

// Config configures a cluster.
type Config struct {
	// Dir holds everything: controlplane/ (PKI, kubeconfigs, etcd, logs),
	// nodes/NAME/ (each node's kubelet directory), logs/, kubeconfigs.
	Dir string
	// Bins are the executables (Build).
	Bins Binaries
	// ExtenderAddr is the extender's host:port (the first replica's with
	// SchedulerReplicas); empty picks a free port.
	ExtenderAddr string
	// SchedulerReplicas, 2 or more, runs the sidecar topology of high
	// availability: that many kube-scheduler replicas electing a leader
	// on the Lease kube-system/kube-scheduler, replica N with host name
	// scheduler-N (its pod's name) and calling its own extender sidecar
	// extender-N, run with --follow-scheduler-lease and identity
	// scheduler-N. 0 or 1: one kube-scheduler without leader election and
	// one extender.
	SchedulerReplicas int
	// Nodes to simulate.
	Nodes []NodeSpec
	// RecoveryWindow is the device plugins' --recovery-window; 0 keeps
	// their default (5m).
	RecoveryWindow time.Duration
	// VerifyPeriod is the device plugins' --verify-period; 0 keeps theirs.
	VerifyPeriod time.Duration
	// TokenTTL is the life of the service-account tokens of the extender
	// and the device plugins; default one hour.
	TokenTTL time.Duration
	// Verbosity is -v of our components.
	Verbosity int
	// Progress gets one line per step; nil discards them.
	Progress io.Writer
}

// manifests are the objects Start applies, relative to the repository
// root: the components' RBAC and the admission policies that narrow it.
var manifests = []string{
	"manifests/extender/rbac.yaml",
	"manifests/deviceplugin/rbac.yaml",
	"manifests/admission/annotations-policy.yaml",
	"manifests/admission/extender-status-policy.yaml",
	"manifests/deviceplugin/admission-policy.yaml",
}

// The policies of manifests, by name.
const (
	annotationsPolicy = "gpushare-annotations"
	nodeScopePolicy   = "gpushare-device-plugin-node-scope"
)

// Cluster is a running control plane, extender and simulated nodes.
type Cluster struct {
	cfg   Config
	CP    *framework.ControlPlane
	Admin kubernetes.Interface
	// extenderKubeconfig authenticates as the extender's service account,
	// with the manifests' RBAC.
	extenderKubeconfig string
	logsDir            string

	mu        sync.Mutex
	extenders []*extenderReplica // one per kube-scheduler replica
	nodes     []*Node            // in Config.Nodes order
}

// extenderReplica is one extender process: the only one, or the sidecar of
// one kube-scheduler replica.
type extenderReplica struct {
	name string          // "extender", or "extender-N" beside scheduler-N
	addr string          // host:port
	proc *framework.Proc // nil while stopped; guarded by the cluster's mu
}

// Node is a simulated node: the node agent (kubelet's device manager) and
// our device plugin, sharing the kubelet directory Dir.
type Node struct {
	Spec NodeSpec
	// Dir is the node's kubelet directory.
	Dir string
	// Cards are the fake cards the plugin reports.
	Cards []gpu.Device
	// Agent and Plugin are the running processes (nil while stopped);
	// guarded by the cluster's mu.
	Agent, Plugin *framework.Proc
	// pluginKubeconfig authenticates as the device plugin's service
	// account with a token bound to the node's plugin pod, so that it
	// carries the node claim the node-scope policy requires.
	pluginKubeconfig string
}

// TotalGiB is the node's GPU memory in GiB.
func (n *Node) TotalGiB() int64 {
	var t int64
	for _, c := range n.Cards {
		t += c.MemoryMiB / 1024
	}
	return t
}

// CheckPort returns a clear error when addr cannot be listened on.
func CheckPort(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("the extender's address %s is taken (%w): is another demo or extender running? Stop it (make demo-down) or choose another port", addr, err)
	}
	return ln.Close()
}

// Start starts the control plane with the scheduler configured from
// config/kube-scheduler-config.yaml to call the extender, applies the
// extender's and the device plugin's RBAC manifests and the admission
// policies, starts the extender as its service account, then every node:
// its agent, then its device plugin (as the plugin's service account with a
// token bound to a pod on the node, as a DaemonSet pod's, --fake-gpus,
// --kubelet-dir the node's directory), and waits until every node
// advertises all its GPU memory. On an error everything started is stopped.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.TokenTTL <= 0 {
		cfg.TokenTTL = time.Hour
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", cfg.Dir, err)
	}
	cfg.Dir = dir
	if cfg.ExtenderAddr == "" {
		if cfg.ExtenderAddr, err = framework.FreeAddr(); err != nil {
			return nil, err
		}
	}
	if err := CheckPort(cfg.ExtenderAddr); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, logsDir: filepath.Join(dir, "logs")}
	if cfg.SchedulerReplicas < 2 {
		c.extenders = []*extenderReplica{{name: "extender", addr: cfg.ExtenderAddr}}
	} else {
		for i := range cfg.SchedulerReplicas {
			addr := cfg.ExtenderAddr
			if i > 0 {
				if addr, err = framework.FreeAddr(); err != nil {
					return nil, err
				}
			}
			c.extenders = append(c.extenders, &extenderReplica{name: fmt.Sprintf("extender-%d", i+1), addr: addr})
		}
	}
	for _, s := range cfg.Nodes {
		cards, err := gpu.ParseFakeGPUs(s.FakeGPUs, s.Name)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", s.Name, err)
		}
		n := &Node{Spec: s, Dir: filepath.Join(dir, "nodes", s.Name), Cards: cards}
		if sock := filepath.Join(n.Dir, "device-plugins", deviceplugin.SocketName); len(sock) > maxSocketPath {
			return nil, fmt.Errorf("the socket path %s is %d bytes, more than Linux's %d: use a shorter directory than %s", sock, len(sock), maxSocketPath, dir)
		}
		if err := os.MkdirAll(n.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating %s: %w", n.Dir, err)
		}
		c.nodes = append(c.nodes, n)
	}
	if err := os.MkdirAll(c.logsDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", c.logsDir, err)
	}
	if err := c.start(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) progress(format string, args ...any) {
	fmt.Fprintf(c.cfg.Progress, format+"\n", args...)
}

func (c *Cluster) start(ctx context.Context) error {
	start := time.Now()
	opts := framework.Options{
		ExtenderURL: "http://" + c.cfg.ExtenderAddr + extenderPrefix,
		Dir:         filepath.Join(c.cfg.Dir, "controlplane"),
	}
	if len(c.extenders) > 1 {
		ha := &framework.SchedulerHA{RenewDeadline: leader.DefaultRenewDeadline}
		for i, e := range c.extenders {
			ha.Replicas = append(ha.Replicas, framework.SchedulerReplica{Host: schedulerHost(i), ExtenderURL: "http://" + e.addr + extenderPrefix})
		}
		opts.SchedulerHA = ha
	}
	cp, err := framework.Start(ctx, opts)
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	c.CP = cp
	c.Admin = cp.Client(framework.AdminUser)
	if ns, lease := cp.SchedulerLease(); lease != "" {
		c.progress("control plane up in %.1fs: etcd, kube-apiserver %s (TLS, RBAC), %d kube-scheduler replicas electing a leader on lease %s/%s, each calling its own extender sidecar",
			time.Since(start).Seconds(), cp.APIServerURL(), len(c.extenders), ns, lease)
	} else {
		c.progress("control plane up in %.1fs: etcd, kube-apiserver %s (TLS, RBAC), kube-scheduler calling the extender at http://%s%s",
			time.Since(start).Seconds(), cp.APIServerURL(), c.cfg.ExtenderAddr, extenderPrefix)
	}

	root, err := framework.RepoRoot()
	if err != nil {
		return err
	}
	for _, m := range manifests {
		if err := framework.Apply(ctx, c.Admin, filepath.Join(root, m)); err != nil {
			return err
		}
	}
	if c.extenderKubeconfig, err = c.CP.ServiceAccountKubeconfig(ctx, systemNamespace, extenderAccount, c.cfg.TokenTTL); err != nil {
		return err
	}
	for _, n := range c.nodes {
		if n.pluginKubeconfig, err = c.pluginToken(ctx, n.Spec.Name); err != nil {
			return err
		}
	}
	if err := c.waitPolicies(ctx); err != nil {
		return err
	}
	c.progress("admission policies %s and %s enforced", annotationsPolicy, nodeScopePolicy)
	if err := c.StartExtender(ctx); err != nil {
		return err
	}
	for _, e := range c.extenders {
		c.progress("%s ready on %s as service account %s/%s", e.name, e.addr, systemNamespace, extenderAccount)
	}
	if len(c.extenders) > 1 {
		var i int
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			i, err = c.Leader(ctx)
			return err == nil && i >= 0, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for a kube-scheduler replica to take the lease: %w", err)
		}
		c.progress("%s leads, beside %s", schedulerHost(i), c.extenders[i].name)
	}

	start = time.Now()
	for _, n := range c.nodes {
		if err := c.startAgent(ctx, n); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := c.StartPlugin(ctx, n.Spec.Name); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := c.WaitNodeGPUs(ctx, n.Spec.Name, n.TotalGiB(), 60*time.Second); err != nil {
			return err
		}
		c.progress("node %s ready: %s (%d GiB) advertised by kubelet's device manager", n.Spec.Name, n.Spec.FakeGPUs, n.TotalGiB())
	}
	c.progress("%d nodes up in %.1fs", len(c.nodes), time.Since(start).Seconds())
	return nil
}

// AdminKubeconfig is the kubeconfig of the cluster admin.
func (c *Cluster) AdminKubeconfig() string { return c.CP.AdminKubeconfig() }

// ExtenderURL is http://ADDR of the extender (the first replica's).
func (c *Cluster) ExtenderURL() string { return c.ExtenderReplicaURL(0) }

// ExtenderReplicas is the number of extender processes: one, or one beside
// each kube-scheduler replica (Config.SchedulerReplicas).
func (c *Cluster) ExtenderReplicas() int { return len(c.extenders) }

// ExtenderReplicaURL is http://ADDR of extender replica i.
func (c *Cluster) ExtenderReplicaURL(i int) string { return "http://" + c.extenders[i].addr }

// ExtenderName is extender replica i's name: "extender", or "extender-N",
// the sidecar of kube-scheduler replica N-1.
func (c *Cluster) ExtenderName(i int) string { return c.extenders[i].name }

// schedulerHost is kube-scheduler replica i's host name, its pod's name.
func schedulerHost(i int) string { return fmt.Sprintf("scheduler-%d", i+1) }

// Leader returns the index of the kube-scheduler replica that holds the
// Lease, whose extender sidecar is the one that places pods (its index is
// the same); 0 with one kube-scheduler; -1 when no replica holds it. A
// replica just killed keeps it until another takes it over.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	if len(c.extenders) == 1 {
		return 0, nil
	}
	i, _, err := c.CP.SchedulerLeader(ctx)
	return i, err
}

// Bins are the executables the cluster runs.
func (c *Cluster) Bins() Binaries { return c.cfg.Bins }

// Nodes returns the simulated nodes.
func (c *Cluster) Nodes() []*Node { return c.nodes }

// Node returns the simulated node called name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.nodes {
		if n.Spec.Name == name {
			return n
		}
	}
	return nil
}

func (c *Cluster) v() string { return "-v=" + strconv.Itoa(c.cfg.Verbosity) }

// StartExtender starts every extender replica that is stopped and waits
// for each one's /readyz.
func (c *Cluster) StartExtender(ctx context.Context) error {
	for i := range c.extenders {
		c.mu.Lock()
		running := c.extenders[i].proc != nil
		c.mu.Unlock()
		if running {
			continue
		}
		if err := c.StartExtenderReplica(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// StartExtenderReplica starts extender replica i and waits for /readyz (a
// sidecar reports ready whether its scheduler leads or not).
func (c *Cluster) StartExtenderReplica(ctx context.Context, i int) error {
	e := c.extenders[i]
	args := []string{"--kubeconfig=" + c.extenderKubeconfig, "--listen=" + e.addr, c.v()}
	if ns, lease := c.CP.SchedulerLease(); lease != "" {
		args = append(args, "--follow-scheduler-lease="+ns+"/"+lease, "--leader-elect-identity="+schedulerHost(i),
			"--leader-elect-renew-deadline="+leader.DefaultRenewDeadline.String())
	}
	p, err := framework.StartProc(e.name, c.cfg.Bins.Extender, args, filepath.Join(c.logsDir, e.name+".log"))
	if err != nil {
		return err
	}
	c.mu.Lock()
	e.proc = p
	c.mu.Unlock()
	client := &http.Client{Timeout: 2 * time.Second}
	return waitFor(ctx, p, 60*time.Second, e.name+"'s /readyz", func() bool {
		resp, err := client.Get("http://" + e.addr + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// StopExtender stops every extender replica: SIGTERM, or SIGKILL when
// crash is set.
func (c *Cluster) StopExtender(crash bool) {
	for i := range c.extenders {
		c.StopExtenderReplica(i, crash)
	}
}

// StopExtenderReplica stops extender replica i: SIGTERM, or SIGKILL when
// crash is set.
func (c *Cluster) StopExtenderReplica(i int, crash bool) {
	c.mu.Lock()
	p := c.extenders[i].proc
	c.extenders[i].proc = nil
	c.mu.Unlock()
	if p == nil {
		return
	}
	if crash {
		p.Kill()
	} else {
		p.Stop(stopGrace)
	}
}

func (c *Cluster) startAgent(ctx context.Context, n *Node) error {
	p, err := framework.StartProc(n.Spec.Name+"/agent", c.cfg.Bins.NodeAgent, []string{
		"--node-name=" + n.Spec.Name, "--kubeconfig=" + c.CP.AdminKubeconfig(), "--kubelet-dir=" + n.Dir,
		"--address=" + n.Spec.Address, c.v(),
	}, filepath.Join(c.logsDir, n.Spec.Name+"-agent.log"))
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.Agent = p
	c.mu.Unlock()
	sock := filepath.Join(n.Dir, "device-plugins", filepath.Base(pluginapi.KubeletSocket))
	return waitFor(ctx, p, 60*time.Second, "kubelet.sock of node "+n.Spec.Name, func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
}

// StartPlugin starts the device plugin of node name; it registers with the
// node agent's device manager on its own.
func (c *Cluster) StartPlugin(_ context.Context, name string) error {
	n := c.Node(name)
	if n == nil {
		return fmt.Errorf("no node %s", name)
	}
	args := []string{
		"--node-name=" + name, "--kubeconfig=" + n.pluginKubeconfig, "--fake-gpus=" + n.Spec.FakeGPUs,
		"--kubelet-dir=" + n.Dir, "--fake-control=" + n.controlFile(), "--cdi-dir=" + filepath.Join(n.Dir, "cdi"), c.v(),
	}
	if n.Spec.FakeDriver != "" {
		// The node agent is no container runtime: it reports
		// none://nodeagent, and what it records of a CDI device is what a
		// CDI runtime would apply. Say so, or there is no driver mode.
		args = append(args, "--fake-driver="+n.Spec.FakeDriver, "--runtime-cdi=true")
	}
	if c.cfg.RecoveryWindow > 0 {
		args = append(args, "--recovery-window="+c.cfg.RecoveryWindow.String())
	}
	if c.cfg.VerifyPeriod > 0 {
		args = append(args, "--verify-period="+c.cfg.VerifyPeriod.String())
	}
	p, err := framework.StartProc(name+"/plugin", c.cfg.Bins.DevicePlugin, args, filepath.Join(c.logsDir, name+"-plugin.log"))
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.Plugin = p
	c.mu.Unlock()
	return nil
}

// pluginToken creates node's plugin pod (the DaemonSet's, in a real
// cluster: the plugin's service account, spec.nodeName node, no resources;
// node's agent runs it like any pod) and returns a kubeconfig with a token
// bound to it. kube-apiserver puts the pod's node in the token, which the
// node-scope policy requires.
func (c *Cluster) pluginToken(ctx context.Context, node string) (string, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: pluginPodPrefix + node, Namespace: systemNamespace,
			// The chart's DaemonSet pod labels, so the docs' commands that
			// select gpushare's pods find these.
			Labels: map[string]string{"app.kubernetes.io/name": devicePluginAccount, "app.kubernetes.io/instance": "gpushare", "app.kubernetes.io/part-of": "gpushare"},
		},
		Spec: corev1.PodSpec{
			ServiceAccountName: devicePluginAccount,
			NodeName:           node,
			Containers:         []corev1.Container{{Name: "device-plugin", Image: "gpushare-device-plugin:dev"}},
		},
	}
	if _, err := c.Admin.CoreV1().Pods(systemNamespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating the device plugin pod of node %s: %w", node, err)
	}
	return c.CP.PodServiceAccountKubeconfig(ctx, systemNamespace, devicePluginAccount, pod.Name, c.cfg.TokenTTL)
}

// waitPolicies waits until kube-apiserver enforces both admission
// policies (it does a moment after they are created), each probed with a
// dry-run request it must refuse: a pod created with an allocation
// annotation, and a label patched onto a plugin pod by its own plugin.
func (c *Cluster) waitPolicies(ctx context.Context) error {
	dryRun := []string{metav1.DryRunAll}
	err := framework.WaitPolicyEnforced(ctx, annotationsPolicy, 30*time.Second, func(ctx context.Context) error {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Annotations: map[string]string{gpushare.AnnotationAllocation: "{}"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		_, err := c.Admin.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{DryRun: dryRun})
		return err
	})
	if err != nil || len(c.nodes) == 0 {
		return err
	}
	n := c.nodes[0]
	plugin, err := deviceplugin.NewClient(n.pluginKubeconfig, 5, 10)
	if err != nil {
		return err
	}
	return framework.WaitPolicyEnforced(ctx, nodeScopePolicy, 30*time.Second, func(ctx context.Context) error {
		_, err := plugin.CoreV1().Pods(systemNamespace).Patch(ctx, pluginPodPrefix+n.Spec.Name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"probe":"x"}}}`), metav1.PatchOptions{DryRun: dryRun})
		return err
	})
}

// StopPlugin stops the device plugin of node name: SIGTERM, or SIGKILL
// when crash is set.
func (c *Cluster) StopPlugin(name string, crash bool) {
	c.mu.Lock()
	n := c.Node(name)
	var p *framework.Proc
	if n != nil {
		p, n.Plugin = n.Plugin, nil
	}
	c.mu.Unlock()
	switch {
	case p == nil:
	case crash:
		p.Kill()
	default:
		p.Stop(stopGrace)
	}
}

// RestartKubelet makes node name's agent restart kubelet's device manager
// (SIGHUP): kubelet.sock is re-created and the plugin must register again.
func (c *Cluster) RestartKubelet(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.Node(name)
	if n == nil || n.Agent == nil {
		return fmt.Errorf("no running agent on node %s", name)
	}
	return n.Agent.Signal(syscall.SIGHUP)
}

// PodResourcesSocket is where the node agent serves kubelet's PodResources
// v1 API (kubelet's own server over its device manager).
func (n *Node) PodResourcesSocket() string {
	cfg := nodeagent.Config{KubeletDir: n.Dir}
	return cfg.PodResourcesSocket()
}

func (n *Node) controlFile() string { return filepath.Join(n.Dir, "fake-gpu-control") }

// FakeGPU sends a command to node name's fake cards (gpu.Fake.Apply: "xid
// INDEX CODE", "probe INDEX fail|ok") through the plugin's --fake-control
// file, and waits until the plugin has taken it.
func (c *Cluster) FakeGPU(ctx context.Context, name, command string) error {
	n := c.Node(name)
	if n == nil {
		return fmt.Errorf("no node %s", name)
	}
	tmp := n.controlFile() + ".tmp"
	if err := os.WriteFile(tmp, []byte(command+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing a fake-GPU command: %w", err)
	}
	if err := os.Rename(tmp, n.controlFile()); err != nil {
		return fmt.Errorf("writing a fake-GPU command: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(n.controlFile())
		return errors.Is(err, os.ErrNotExist), nil
	})
}

// WaitNodeGPUs waits until node name's allocatable gpu-mem is want and its
// inventory annotation lists its cards.
func (c *Cluster) WaitNodeGPUs(ctx context.Context, name string, want int64, timeout time.Duration) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		node, err := c.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil //nolint:nilerr // retried until the timeout
		}
		q := node.Status.Allocatable[gpushare.ResourceGPUMem]
		_, inv := node.Annotations[gpushare.AnnotationInventory]
		last = fmt.Sprintf("allocatable %s=%s, inventory published: %v", gpushare.ResourceGPUMem, q.String(), inv)
		return q.Value() == want && inv, nil
	})
	if err != nil {
		plugin := filepath.Join(c.logsDir, name+"-plugin.log")
		return fmt.Errorf("node %s never advertised %d GiB (last: %s); agent log %s, plugin log %s:\n%s",
			name, want, last, filepath.Join(c.logsDir, name+"-agent.log"), plugin, framework.Tail(plugin, 15))
	}
	return nil
}

// ProcInfo names one running process.
type ProcInfo struct {
	Name string
	PID  int
	Exe  string // the executable, argv[0]
}

// Processes lists every running process of the cluster, children first and
// the control plane last.
func (c *Cluster) Processes() []ProcInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ProcInfo
	add := func(p *framework.Proc) {
		if p != nil && !p.Exited() {
			out = append(out, ProcInfo{Name: p.Name, PID: p.PID(), Exe: p.Path})
		}
	}
	for _, n := range c.nodes {
		add(n.Plugin)
		add(n.Agent)
	}
	for _, e := range c.extenders {
		add(e.proc)
	}
	if c.CP != nil {
		bins := c.cfg.Bins.ControlPlane
		exe := map[string]string{"etcd": bins.Etcd, "kube-apiserver": bins.APIServer, "kube-scheduler": bins.Scheduler}
		names := []string{"kube-scheduler"}
		if c.CP.SchedulerReplicas() > 1 {
			names = names[:0]
			for i := range c.CP.SchedulerReplicas() {
				names = append(names, c.CP.SchedulerHost(i))
				exe[c.CP.SchedulerHost(i)] = bins.Scheduler
			}
		}
		for _, name := range append(names, "kube-apiserver", "etcd") {
			if pid, ok := c.CP.PIDs()[name]; ok {
				out = append(out, ProcInfo{Name: name, PID: pid, Exe: exe[name]})
			}
		}
	}
	return out
}

// Exited returns the processes of the cluster that have ended, each with
// its log's tail, without the ones stopped on purpose: the control plane's
// (a kube-scheduler replica that lost its Lease exits), the extenders',
// the nodes'.
func (c *Cluster) Exited() []error {
	var out []error
	if c.CP != nil {
		out = c.CP.Exited()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	check := func(p *framework.Proc) {
		if p != nil && p.Exited() {
			out = append(out, p.ExitError())
		}
	}
	for _, e := range c.extenders {
		check(e.proc)
	}
	for _, n := range c.nodes {
		check(n.Agent)
		check(n.Plugin)
	}
	return out
}

// Stop stops every process it started: device plugins, agents, the
// extender, then the control plane. It may be called more than once.
func (c *Cluster) Stop() {
	c.mu.Lock()
	var procs []*framework.Proc
	for _, n := range c.nodes {
		procs = append(procs, n.Plugin, n.Agent)
		n.Plugin, n.Agent = nil, nil
	}
	for _, e := range c.extenders {
		procs = append(procs, e.proc)
		e.proc = nil
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Stop(stopGrace)
		}()
	}
	wg.Wait()
	if c.CP != nil {
		c.CP.Stop()
	}
}

// LogsDir holds extender.log (extender-N.log with SchedulerReplicas),
// NODE-agent.log and NODE-plugin.log.
func (c *Cluster) LogsDir() string { return c.logsDir }

// waitFor polls ok until it holds, p exits, ctx ends or timeout passes.
func waitFor(ctx context.Context, p *framework.Proc, timeout time.Duration, what string, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if p.Exited() {
			return fmt.Errorf("waiting for %s: %w", what, p.ExitError())
		}
		if ok() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: not there after %s; last lines of %s:\n%s", what, timeout, p.LogPath, framework.Tail(p.LogPath, 25))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// PodsOnNode lists the pods bound to node in namespace ns ("" for all).
func (c *Cluster) PodsOnNode(ctx context.Context, ns, node string) ([]corev1.Pod, error) {
	list, err := c.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of node %s: %w", node, err)
	}
	return list.Items, nil
}
