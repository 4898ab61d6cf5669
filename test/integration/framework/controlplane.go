package framework

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"
)

// AdminUser is the identity in group system:masters that every control plane has.
const AdminUser = "admin"

const (
	etcdTimeout      = 30 * time.Second
	apiserverTimeout = 120 * time.Second
	schedulerTimeout = 60 * time.Second
	stopGrace        = 10 * time.Second
)

// User is an extra static-token identity for the kube-apiserver. It has no
// permissions beyond what RBAC grants system:authenticated until a test binds
// some.
type User struct {
	Name   string
	Groups []string
}

// Options configures Start.
type Options struct {
	// ExtenderURL, when set, starts kube-scheduler with every extender of
	// SchedulerConfig pointed at it: it replaces urlPrefix as a whole, so it
	// includes the path, e.g. "http://127.0.0.1:8080/gpushare-scheduler".
	ExtenderURL string
	// Scheduler starts kube-scheduler even without ExtenderURL; the
	// extenders of SchedulerConfig are then dropped.
	Scheduler bool
	// SchedulerConfig is the KubeSchedulerConfiguration file to load;
	// default <repo>/config/kube-scheduler-config.yaml. Only
	// clientConnection.kubeconfig, leaderElection (off, or SchedulerHA), the
	// extenders' urlPrefix and, with ExtenderTLS, their tlsConfig file
	// paths are overridden.
	SchedulerConfig string
	// ExtenderTLS, when set, replaces the file paths of every extender's
	// tlsConfig (which SchedulerConfig must have) with these, for a
	// configuration that calls the extender over HTTPS, such as
	// config/kube-scheduler-config-https.yaml. An empty path removes its
	// key (e.g. no client certificate).
	ExtenderTLS *ExtenderTLS
	// SchedulerHA, when set, starts several kube-scheduler replicas that
	// elect a leader instead of one without leader election.
	SchedulerHA *SchedulerHA
	// Users are extra identities, each with its own token and kubeconfig.
	Users []User
	// Dir holds the PKI, kubeconfigs, etcd data and logs/. Default: a new
	// directory under os.TempDir() that Start leaves in place (StartT
	// removes it after a passing test).
	Dir string
	// Nodes, when set, makes the control plane one that real nodes and
	// their pods can use (test/node); see NodeAccess.
	Nodes *NodeAccess
	// KubernetesVersion of kube-apiserver, kube-scheduler and
	// kube-controller-manager (and, with Nodes, of the node binaries):
	// KubernetesVersion or KubernetesVersionOldest; "" is
	// DefaultKubernetesVersion, or KubernetesVersion with Nodes.
	KubernetesVersion string
	// Controllers, when set, starts kube-controller-manager with these
	// controllers (its --controllers names, e.g.
	// "resourceclaim-controller") after kube-apiserver. Not with Nodes,
	// which runs NodeControllers.
	Controllers []string
	// APIServerFeatureGates are kube-apiserver's --feature-gates, e.g.
	// {"DRAConsumableCapacity": true}.
	APIServerFeatureGates map[string]bool
}

// featureGatesArg is the --feature-gates argument for gates, sorted; none
// for no gates.
func featureGatesArg(gates map[string]bool) []string {
	if len(gates) == 0 {
		return nil
	}
	kv := make([]string, 0, len(gates))
	for name, on := range gates {
		kv = append(kv, fmt.Sprintf("%s=%t", name, on))
	}
	slices.Sort(kv)
	return []string{"--feature-gates=" + strings.Join(kv, ",")}
}

// NodeAccess is what a control plane needs for real nodes, whose pods talk
// to the API from their own network namespaces:
//   - kube-apiserver listens on every address, not only loopback, and
//     advertises AdvertiseAddress in the kubernetes Service's endpoints,
//     which kube-proxy on the node routes ClusterIP 10.0.0.1:443 to (its
//     certificate names 10.0.0.1 and kubernetes.default.svc);
//   - the ServiceAccount admission plugin is on, so pods get their
//     service-account token volume;
//   - kube-controller-manager runs the controllers that a node's workloads
//     need (NodeControllers).
//
// Nodes are not tainted not-ready (TaintNodesByCondition stays off and no
// node-lifecycle controller runs), so kube-scheduler places pods on a node
// as soon as it is registered.
type NodeAccess struct {
	// AdvertiseAddress is an address of this machine that pods can reach,
	// such as the address of its default route's interface.
	AdvertiseAddress string
}

// NodeControllers are the kube-controller-manager controllers a control
// plane with NodeAccess runs: Deployments, ReplicaSets and DaemonSets
// make pods; the garbage collector deletes what their owners leave when
// deleted (helm uninstall relies on it); each namespace gets its default
// ServiceAccount and the kube-root-ca.crt ConfigMap every token volume
// mounts; Secrets of type kubernetes.io/service-account-token get their
// token (the chart's extender sidecar mounts one: without it the
// scheduler's pods never start); Services get EndpointSlices for
// kube-proxy; PodDisruptionBudgets get their status; deleted namespaces
// are emptied; pods naming a ResourceClaimTemplate get their claims (the
// DRA driver's pods, converted by the chart's webhook).
var NodeControllers = []string{
	"daemonset-controller",
	"deployment-controller",
	"disruption-controller",
	"endpointslice-controller",
	"garbage-collector-controller",
	"namespace-controller",
	"replicaset-controller",
	"resourceclaim-controller",
	"root-ca-certificate-publisher-controller",
	"serviceaccount-controller",
	"serviceaccount-token-controller",
}

// ExtenderTLS are the files kube-scheduler reads to call an extender over
// HTTPS: its client certificate and key, and the CA bundle it verifies the
// extender's serving certificate with.
type ExtenderTLS struct {
	CertFile, KeyFile, CAFile string
}

// ControlPlane is a running etcd, kube-apiserver and, optionally, kube-scheduler.
type ControlPlane struct {
	dir      string
	logsDir  string
	bins     Binaries
	nodeBins NodeBinaries // with Options.Nodes only
	nodes    *NodeAccess  // Options.Nodes
	pki      pki
	caData   []byte
	etcdURL  string
	apiURL   string
	// schedulers are kube-scheduler's replicas, for StartScheduler: one
	// without Options.SchedulerHA, none when it was not started.
	schedulers  []*schedulerReplica
	lease       *SchedulerHA // nil without leader election
	tokens      map[string]string
	kubeconfigs map[string]string

	mu          sync.Mutex
	procs       []*Proc              // in start order
	leaseClient kubernetes.Interface // SchedulerLeader's, made on first use
	stopOnce    sync.Once
}

// StartT starts a control plane for a test: it calls t.Fatal on error and
// registers Stop with t.Cleanup. Unless opts.Dir is given, the directory is
// removed after a passing test and kept, with its path logged, after a
// failing one.
func StartT(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	ownDir := opts.Dir == ""
	if ownDir {
		d, err := os.MkdirTemp("", "gpushare-controlplane-")
		if err != nil {
			t.Fatalf("creating the control-plane directory: %v", err)
		}
		opts.Dir = d
	}
	start := time.Now()
	cp, err := Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("starting the control plane: %v\n(logs kept in %s)", err, filepath.Join(opts.Dir, "logs"))
	}
	t.Logf("control plane up in %s: %s (dir %s)", time.Since(start).Round(100*time.Millisecond), cp.APIServerURL(), cp.Dir())
	t.Cleanup(func() {
		cp.Stop()
		if t.Failed() {
			t.Logf("control-plane logs kept in %s", cp.LogsDir())
			return
		}
		if ownDir {
			_ = os.RemoveAll(cp.Dir())
		}
	})
	return cp
}

// Start builds the binaries if needed (see EnsureBinaries), then starts etcd,
// kube-apiserver and, if opts asks for it, kube-scheduler, each waited for
// until healthy. ctx bounds the start-up only: the processes run until Stop
// or until this process dies. On error everything started is stopped and the
// logs are left in opts.Dir.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	version := opts.KubernetesVersion
	if version == "" && opts.Nodes == nil {
		v, err := DefaultKubernetesVersion()
		if err != nil {
			return nil, err
		}
		version = v
	}
	if version == "" {
		version = KubernetesVersion
	}
	if opts.Nodes != nil && len(opts.Controllers) > 0 {
		return nil, fmt.Errorf("starting a control plane for nodes: it runs NodeControllers, not %v", opts.Controllers)
	}
	bins, err := EnsureVersionBinaries(ctx, version, len(opts.Controllers) > 0)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{bins: bins, nodes: opts.Nodes, tokens: map[string]string{}, kubeconfigs: map[string]string{}}
	if opts.Nodes != nil {
		if opts.Nodes.AdvertiseAddress == "" {
			return nil, errors.New("starting a control plane for nodes: NodeAccess.AdvertiseAddress is empty")
		}
		if cp.nodeBins, err = EnsureNodeBinariesFor(ctx, version); err != nil {
			return nil, err
		}
	}
	if err := cp.prepare(opts); err != nil {
		return nil, err
	}
	if err := cp.launch(ctx, opts); err != nil {
		cp.Stop()
		return nil, fmt.Errorf("%w (logs in %s)", err, cp.logsDir)
	}
	return cp, nil
}

// prepare writes the directory layout, PKI, token file and kubeconfigs.
func (cp *ControlPlane) prepare(opts Options) error {
	dir := opts.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "gpushare-controlplane-")
		if err != nil {
			return fmt.Errorf("creating the control-plane directory: %w", err)
		}
		dir = d
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("resolving the control-plane directory: %w", err)
	}
	cp.dir = dir
	cp.logsDir = filepath.Join(dir, "logs")
	if err := os.MkdirAll(cp.logsDir, 0o755); err != nil {
		return fmt.Errorf("creating the logs directory: %w", err)
	}
	if cp.pki, err = writePKI(filepath.Join(dir, "pki")); err != nil {
		return err
	}
	if cp.caData, err = os.ReadFile(cp.pki.CACert); err != nil {
		return fmt.Errorf("reading the CA certificate: %w", err)
	}

	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	cp.etcdURL = "http://127.0.0.1:" + strconv.Itoa(ports[0])
	cp.apiURL = "https://127.0.0.1:" + strconv.Itoa(ports[2])

	users := append([]User{{Name: AdminUser, Groups: []string{"system:masters"}}}, opts.Users...)
	var tokenFile strings.Builder
	for _, u := range users {
		if err := validUser(u); err != nil {
			return err
		}
		if _, dup := cp.tokens[u.Name]; dup {
			return fmt.Errorf("adding user %q: the name is taken (%q is built in)", u.Name, AdminUser)
		}
		tok := randomToken()
		cp.tokens[u.Name] = tok
		fmt.Fprintf(&tokenFile, "%s,%s,%s,\"%s\"\n", tok, u.Name, u.Name, strings.Join(u.Groups, ","))
		path := filepath.Join(dir, "kubeconfig-"+u.Name)
		if err := cp.writeKubeconfig(path, u.Name, tok); err != nil {
			return err
		}
		cp.kubeconfigs[u.Name] = path
	}
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(tokenFile.String()), 0o600); err != nil {
		return fmt.Errorf("writing the token file: %w", err)
	}
	return nil
}

func validUser(u User) error {
	bad := func(s string) bool { return s == "" || strings.ContainsAny(s, ",\"\n\r") }
	if bad(u.Name) || strings.ContainsAny(u.Name, "/\\") {
		return fmt.Errorf("adding user %q: names must be non-empty without , \" / \\ or newlines", u.Name)
	}
	for _, g := range u.Groups {
		if bad(g) {
			return fmt.Errorf("adding user %q: group %q must be non-empty without , \" or newlines", u.Name, g)
		}
	}
	return nil
}

func (cp *ControlPlane) writeKubeconfig(path, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["gpushare-test"] = &clientcmdapi.Cluster{Server: cp.apiURL, CertificateAuthority: cp.pki.CACert}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["gpushare-test"] = &clientcmdapi.Context{Cluster: "gpushare-test", AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = "gpushare-test"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing the kubeconfig for %s: %w", user, err)
	}
	return nil
}

// launch starts and waits for each component in turn.
func (cp *ControlPlane) launch(ctx context.Context, opts Options) error {
	peerPorts, err := freePorts(1)
	if err != nil {
		return err
	}
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPorts[0])
	etcd, err := cp.start("etcd", cp.bins.Etcd,
		"--data-dir="+filepath.Join(cp.dir, "etcd"),
		"--listen-client-urls="+cp.etcdURL,
		"--advertise-client-urls="+cp.etcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=default="+peerURL,
		"--name=default",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if err := waitHealthy(ctx, etcd, etcdTimeout, plain, cp.etcdURL+"/health", "", func(body string) bool {
		return strings.Contains(body, "true")
	}); err != nil {
		return err
	}

	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.caData)
	trusted := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	apiserverArgs := append(cp.apiserverAccessArgs(),
		"--etcd-servers="+cp.etcdURL,
		"--secure-port="+strings.TrimPrefix(cp.apiURL, "https://127.0.0.1:"),
		"--cert-dir="+filepath.Join(cp.dir, "apiserver-certs"),
		"--tls-cert-file="+cp.pki.ServerCert,
		"--tls-private-key-file="+cp.pki.ServerKey,
		"--client-ca-file="+cp.pki.CACert,
		"--token-auth-file="+filepath.Join(cp.dir, "tokens.csv"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+cp.pki.SAPub,
		"--service-account-signing-key-file="+cp.pki.SAKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--allow-privileged=true",
		"--profiling=false",
	)
	apiserver, err := cp.start(APIServerName, cp.bins.APIServer, append(apiserverArgs, featureGatesArg(opts.APIServerFeatureGates)...)...)
	if err != nil {
		return err
	}
	if err := waitHealthy(ctx, apiserver, apiserverTimeout, trusted, cp.apiURL+"/readyz", cp.tokens[AdminUser], func(body string) bool {
		return strings.TrimSpace(body) == "ok"
	}); err != nil {
		return err
	}
	switch {
	case cp.nodes != nil:
		if err := cp.startControllerManager(ctx, cp.nodeBins.ControllerManager, NodeControllers); err != nil {
			return err
		}
	case len(opts.Controllers) > 0:
		if err := cp.startControllerManager(ctx, cp.bins.ControllerManager, opts.Controllers); err != nil {
			return err
		}
	}

	if opts.ExtenderURL == "" && !opts.Scheduler && opts.SchedulerHA == nil {
		return nil
	}
	replicas, err := cp.schedulerReplicas(opts)
	if err != nil {
		return err
	}
	cp.schedulers = replicas
	for _, r := range replicas {
		p, err := r.start(cp.bins.Scheduler, filepath.Join(cp.logsDir, r.name+".log"))
		if err != nil {
			return err
		}
		cp.mu.Lock()
		cp.procs = append(cp.procs, p)
		cp.mu.Unlock()
	}
	for i, r := range replicas {
		if err := cp.waitScheduler(ctx, cp.proc(r.name), i); err != nil {
			return err
		}
	}
	return nil
}

// apiserverAccessArgs are kube-apiserver's flags that differ with
// NodeAccess: where it listens, what it advertises, and the admission
// plugins that are off.
func (cp *ControlPlane) apiserverAccessArgs() []string {
	if cp.nodes == nil {
		// Loopback only; no kubernetes endpoints (127.0.0.1 is refused
		// there); pods without a service account need no token.
		return []string{
			"--bind-address=127.0.0.1",
			"--advertise-address=127.0.0.1",
			"--endpoint-reconciler-type=none",
			"--disable-admission-plugins=TaintNodesByCondition,ServiceAccount",
		}
	}
	return []string{
		"--bind-address=0.0.0.0",
		"--advertise-address=" + cp.nodes.AdvertiseAddress,
		"--disable-admission-plugins=TaintNodesByCondition",
		// kubectl logs and exec reach a kubelet at its node's address.
		"--kubelet-preferred-address-types=InternalIP",
	}
}

// startControllerManager starts kube-controller-manager bin with
// controllers and waits until it is healthy.
func (cp *ControlPlane) startControllerManager(ctx context.Context, bin string, controllers []string) error {
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	url := "https://127.0.0.1:" + strconv.Itoa(ports[0])
	kcm, err := cp.start(ControllerManagerName, bin,
		"--kubeconfig="+cp.AdminKubeconfig(),
		"--controllers="+strings.Join(controllers, ","),
		"--root-ca-file="+cp.pki.CACert,
		"--service-account-private-key-file="+cp.pki.SAKey,
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(ports[0]),
		"--v=2",
	)
	if err != nil {
		return err
	}
	// Its serving certificate is self-signed, made up at start.
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health check
	return waitHealthy(ctx, kcm, schedulerTimeout, insecure, url+"/healthz", "", func(body string) bool {
		return strings.TrimSpace(body) == "ok"
	})
}

// waitScheduler waits until kube-scheduler replica i answers /healthz.
func (cp *ControlPlane) waitScheduler(ctx context.Context, p *Proc, i int) error {
	// The scheduler serves a self-signed certificate it makes up at start.
	insecure := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // loopback health check
	return waitHealthy(ctx, p, schedulerTimeout, insecure, cp.schedulers[i].url+"/healthz", "", func(body string) bool {
		return strings.TrimSpace(body) == "ok"
	})
}

// Names of the components, as PIDs and Signal know them.
const (
	APIServerName         = "kube-apiserver"
	SchedulerName         = "kube-scheduler"
	ControllerManagerName = "kube-controller-manager"
)

// proc returns the latest process started under name, or nil.
func (cp *ControlPlane) proc(name string) *Proc {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	for i := len(cp.procs) - 1; i >= 0; i-- {
		if cp.procs[i].Name == name {
			return cp.procs[i]
		}
	}
	return nil
}

// Signal sends sig to the named component's process (e.g. SIGSTOP and
// SIGCONT to APIServerName, for a server that stops answering for a while).
func (cp *ControlPlane) Signal(name string, sig syscall.Signal) error {
	p := cp.proc(name)
	if p == nil {
		return fmt.Errorf("signalling %s: no such component", name)
	}
	return p.Signal(sig)
}

// KillScheduler SIGKILLs kube-scheduler replica i (0 without
// Options.SchedulerHA; a crash) and returns once it has exited;
// StartScheduler brings it back.
func (cp *ControlPlane) KillScheduler(i int) error {
	if i < 0 || i >= len(cp.schedulers) {
		return fmt.Errorf("killing %s replica %d: there are %d", SchedulerName, i, len(cp.schedulers))
	}
	p := cp.proc(cp.schedulers[i].name)
	if p == nil {
		return fmt.Errorf("killing %s: it was not started", cp.schedulers[i].name)
	}
	p.Kill()
	return nil
}

// StartScheduler starts kube-scheduler replica i again, with the arguments,
// port and host name of its first start, after KillScheduler, and waits
// until it is healthy. It returns an error when it is still running.
func (cp *ControlPlane) StartScheduler(ctx context.Context, i int) error {
	if i < 0 || i >= len(cp.schedulers) {
		return fmt.Errorf("restarting %s replica %d: there are %d", SchedulerName, i, len(cp.schedulers))
	}
	r := cp.schedulers[i]
	old := cp.proc(r.name)
	if old == nil {
		return fmt.Errorf("restarting %s: it was never started", r.name)
	}
	if !old.Exited() {
		return fmt.Errorf("restarting %s: pid %d is still running", r.name, old.PID())
	}
	p, err := r.start(cp.bins.Scheduler, old.LogPath)
	if err != nil {
		return err
	}
	cp.mu.Lock()
	for i := range cp.procs {
		if cp.procs[i] == old {
			cp.procs[i] = p // keeps the stop order
		}
	}
	cp.mu.Unlock()
	return cp.waitScheduler(ctx, p, i)
}

// ReconfigureScheduler stops kube-scheduler (started without
// Options.SchedulerHA), rewrites its configuration from opts'
// SchedulerConfig, ExtenderURL and ExtenderTLS as Start would, and starts
// it again: for an extender that exists only once the control plane runs,
// such as one installed into the cluster (test/node's extender topology).
func (cp *ControlPlane) ReconfigureScheduler(ctx context.Context, opts Options) error {
	if len(cp.schedulers) != 1 || cp.lease != nil {
		return fmt.Errorf("reconfiguring %s: it runs %d replicas with leader election %v; only a single replica can be reconfigured", SchedulerName, len(cp.schedulers), cp.lease != nil)
	}
	if opts.SchedulerHA != nil {
		return fmt.Errorf("reconfiguring %s: SchedulerHA cannot be added to a running control plane", SchedulerName)
	}
	if err := cp.KillScheduler(0); err != nil {
		return err
	}
	if _, err := cp.writeSchedulerConfig(opts, opts.ExtenderURL, cp.schedulers[0].name+"-config.yaml"); err != nil {
		return err
	}
	return cp.StartScheduler(ctx, 0)
}

// writeSchedulerConfig loads opts.SchedulerConfig, applies the overrides
// (the extenders pointed at extenderURL) and writes the result into the
// control-plane directory as file.
func (cp *ControlPlane) writeSchedulerConfig(opts Options, extenderURL, file string) (string, error) {
	src := opts.SchedulerConfig
	if src == "" {
		root, err := RepoRoot()
		if err != nil {
			return "", fmt.Errorf("locating the default scheduler config: %w", err)
		}
		src = filepath.Join(root, "config", "kube-scheduler-config.yaml")
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return "", fmt.Errorf("reading the scheduler config: %w", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("parsing the scheduler config %s: %w", src, err)
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	section := func(key string) (map[string]any, error) {
		switch v := cfg[key].(type) {
		case nil:
			m := map[string]any{}
			cfg[key] = m
			return m, nil
		case map[string]any:
			return v, nil
		default:
			return nil, fmt.Errorf("parsing the scheduler config %s: %s is a %T, not a mapping", src, key, v)
		}
	}
	cc, err := section("clientConnection")
	if err != nil {
		return "", err
	}
	cc["kubeconfig"] = cp.AdminKubeconfig()
	le, err := section("leaderElection")
	if err != nil {
		return "", err
	}
	le["leaderElect"] = false
	if ha := opts.SchedulerHA; ha != nil {
		le["leaderElect"] = true
		le["resourceLock"] = "leases"
		le["resourceNamespace"], le["resourceName"] = ha.LeaseNamespace, ha.LeaseName
		le["leaseDuration"], le["renewDeadline"], le["retryPeriod"] = ha.LeaseDuration.String(), ha.RenewDeadline.String(), ha.RetryPeriod.String()
	}

	if extenderURL == "" {
		delete(cfg, "extenders")
	} else {
		exts, _ := cfg["extenders"].([]any)
		if len(exts) == 0 {
			return "", fmt.Errorf("pointing the scheduler at %s: %s has no extenders", extenderURL, src)
		}
		for i, e := range exts {
			m, ok := e.(map[string]any)
			if !ok {
				return "", fmt.Errorf("parsing the scheduler config %s: extenders[%d] is a %T, not a mapping", src, i, e)
			}
			m["urlPrefix"] = extenderURL
			if opts.ExtenderTLS == nil {
				continue
			}
			tc, ok := m["tlsConfig"].(map[string]any)
			if !ok {
				return "", fmt.Errorf("pointing the scheduler at %s over HTTPS: extenders[%d] of %s has no tlsConfig", extenderURL, i, src)
			}
			for key, path := range map[string]string{"certFile": opts.ExtenderTLS.CertFile, "keyFile": opts.ExtenderTLS.KeyFile, "caFile": opts.ExtenderTLS.CAFile} {
				if path == "" {
					delete(tc, key)
				} else {
					tc[key] = path
				}
			}
		}
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("encoding the scheduler config: %w", err)
	}
	path := filepath.Join(cp.dir, file)
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return "", fmt.Errorf("writing the scheduler config: %w", err)
	}
	return path, nil
}

func (cp *ControlPlane) start(name, bin string, args ...string) (*Proc, error) {
	p, err := StartProc(name, bin, args, filepath.Join(cp.logsDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	cp.procs = append(cp.procs, p)
	cp.mu.Unlock()
	return p, nil
}

// waitHealthy polls url until ok accepts a 200 response body, failing early
// if p exits or ctx ends.
func waitHealthy(ctx context.Context, p *Proc, timeout time.Duration, client *http.Client, url, token string, ok func(string) bool) error {
	deadline := time.Now().Add(timeout)
	last := "no response yet"
	for {
		if p.Exited() {
			return fmt.Errorf("waiting for %s to become healthy: %w", p.Name, p.ExitError())
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("waiting for %s to become healthy: %w", p.Name, err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if resp, err := client.Do(req); err != nil {
			last = err.Error()
		} else {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK && ok(string(body)) {
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, LastLines(string(body), 20))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s to become healthy: no success from %s within %s; last: %s; last lines of %s:\n%s",
				p.Name, url, timeout, last, p.LogPath, Tail(p.LogPath, 40))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to become healthy: %w", p.Name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Stop stops kube-scheduler, kube-apiserver and etcd, in that order: SIGTERM
// to each process group, SIGKILL after 10 s. It returns once all have exited
// and may be called more than once. The directory is left in place.
func (cp *ControlPlane) Stop() {
	cp.stopOnce.Do(func() {
		cp.mu.Lock()
		procs := cp.procs
		cp.mu.Unlock()
		for i := len(procs) - 1; i >= 0; i-- {
			procs[i].Stop(stopGrace)
		}
	})
}

// Exited returns how each component that has ended did, with the end of
// its log (a kube-scheduler replica killed by KillScheduler counts until
// StartScheduler). Empty while everything runs.
func (cp *ControlPlane) Exited() []error {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []error
	for _, p := range cp.procs {
		if p.Exited() {
			out = append(out, p.ExitError())
		}
	}
	return out
}

// Dir is the control plane's directory (PKI, kubeconfigs, etcd data, logs).
func (cp *ControlPlane) Dir() string { return cp.dir }

// Version is the Kubernetes version of kube-apiserver and kube-scheduler.
func (cp *ControlPlane) Version() string { return cp.bins.Version }

// SchedulerBinary is the path of the kube-scheduler executable of Version.
func (cp *ControlPlane) SchedulerBinary() string { return cp.bins.Scheduler }

// LogsDir holds one NAME.log per component.
func (cp *ControlPlane) LogsDir() string { return cp.logsDir }

// APIServerURL is the kube-apiserver's https://127.0.0.1:PORT.
func (cp *ControlPlane) APIServerURL() string { return cp.apiURL }

// EtcdURL is etcd's client URL, http://127.0.0.1:PORT.
func (cp *ControlPlane) EtcdURL() string { return cp.etcdURL }

// SchedulerURL is kube-scheduler's https://127.0.0.1:PORT (the first
// replica's), or "" when it was not started.
func (cp *ControlPlane) SchedulerURL() string {
	if len(cp.schedulers) == 0 {
		return ""
	}
	return cp.schedulers[0].url
}

// CACertFile is the PEM file of the CA that signed the apiserver's certificate.
func (cp *ControlPlane) CACertFile() string { return cp.pki.CACert }

// PIDs maps each started component's name to its process id (which is also
// its process group id).
func (cp *ControlPlane) PIDs() map[string]int {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	out := make(map[string]int, len(cp.procs))
	for _, p := range cp.procs {
		out[p.Name] = p.PID()
	}
	return out
}

// KubeconfigFor returns the kubeconfig path of AdminUser or of one of
// Options.Users. It panics for an unknown user.
func (cp *ControlPlane) KubeconfigFor(user string) string {
	path, ok := cp.kubeconfigs[user]
	if !ok {
		panic(fmt.Sprintf("framework: unknown user %q", user))
	}
	return path
}

// AdminKubeconfig is KubeconfigFor(AdminUser).
func (cp *ControlPlane) AdminKubeconfig() string { return cp.KubeconfigFor(AdminUser) }

// RESTConfig returns a client configuration for user (QPS 500, burst 1000).
// It panics for an unknown user.
func (cp *ControlPlane) RESTConfig(user string) *rest.Config {
	tok, ok := cp.tokens[user]
	if !ok {
		panic(fmt.Sprintf("framework: unknown user %q", user))
	}
	return &rest.Config{
		Host:            cp.apiURL,
		BearerToken:     tok,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), cp.caData...)},
		QPS:             500,
		Burst:           1000,
	}
}

// Client returns a clientset acting as user. It panics for an unknown user.
func (cp *ControlPlane) Client(user string) kubernetes.Interface {
	return kubernetes.NewForConfigOrDie(cp.RESTConfig(user))
}

func randomToken() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}
