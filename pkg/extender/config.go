package extender

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeclient"
	"github.com/gpushare/gpushare/pkg/leader"
	"github.com/gpushare/gpushare/pkg/webhook"
)

// DefaultListen is the default listen address: loopback, for a
// kube-scheduler on the same host (a static pod, or the sidecar topology).
// The verbs can bind any pending GPU pod, and inspect shows every GPU pod.
// So exposing them beyond the host is the operator's explicit choice.
const DefaultListen = "127.0.0.1:39999"

// Config is the extender's configuration, as set by its flags.
type Config struct {
	// Kubeconfig path; empty for in-cluster configuration.
	Kubeconfig string
	// Listen is the listen address of the extender API, e.g.
	// "127.0.0.1:39999".
	Listen string
	// TLSCertFile and TLSKeyFile, when both are set, serve Listen over HTTPS
	// with this certificate, reloaded when the files change.
	TLSCertFile, TLSKeyFile string
	// ClientCAFile, when set with TLS, makes Listen require a client
	// certificate signed by one of its CAs (kube-scheduler's). It is reloaded
	// when it changes. It needs MetricsListen: kubelet's probes and Prometheus
	// present no client certificate.
	ClientCAFile string
	// MetricsListen, when set, serves /healthz, /readyz, /version and
	// /metrics there too, over plain HTTP (see Handlers.ProbeRouter).
	MetricsListen string
	// Profiling serves Go's profiles (net/http/pprof) at /debug/pprof/ on
	// MetricsListen: CPU, heap and goroutines of a running extender. It is off
	// by default. It needs MetricsListen, and is never on the extender API's
	// listener.
	Profiling bool
	// WebhookListen, when set, serves the mutating webhook (pkg/webhook)
	// there over HTTPS with WebhookTLSCertFile and WebhookTLSKeyFile,
	// reloaded when they change.
	WebhookListen                         string
	WebhookTLSCertFile, WebhookTLSKeyFile string
	// SchedulerName is what the webhook sets spec.schedulerName to.
	SchedulerName string
	// WebhookDRANodeSelector, KEY=VALUE[,KEY=VALUE...], holds the labels of
	// the gpushare DRA driver's nodes; empty turns the conversion off.
	// Otherwise the webhook converts into claim pods (webhook.DRA) the pods
	// that select every one of them: by spec.nodeSelector, or every term of
	// their required node affinity.
	WebhookDRANodeSelector string
	// WebhookDRAUnit is aliyun.com/gpu-mem's unit for that conversion: GiB
	// or MiB, "" for GiB. With DRANodeChoice it is also the unit the DRA
	// nodes' memory is counted in.
	WebhookDRAUnit string
	// DRANodeChoice: filter rates the nodes of pods asking the marker
	// gpushare.io/dra-claim, the claim pods of the gpushare DRA driver. It
	// rates them from the driver's ResourceSlices and the allocated
	// ResourceClaims, which the extender then watches. The webhook's
	// conversion adds the marker.
	DRANodeChoice bool
	// CertCheckPeriod is how often the TLS files are stat'ed besides the
	// fsnotify events; certs.DefaultCheckPeriod when zero.
	CertCheckPeriod time.Duration
	// Policy is the default scoring policy.
	Policy string
	// QPS and Burst of the API client. A bind makes one call (the Binding),
	// more on a conflict or an informer miss.
	QPS   float32
	Burst int
	// AssumeTTL bounds how long cards stay held for a bind that never completed.
	AssumeTTL time.Duration
	// FilterAll: filter passes every node that fits, not only the
	// best-scoring ones (see HandlersConfig.FilterAll). Its flag is
	// --filter-best=false.
	FilterAll bool
	// PercentageOfNodesToScore is kube-scheduler's, 0 to 100; 0 is its
	// adaptive default. A preemption reads from it whether kube-scheduler may
	// have stopped filtering before it found every node that fits.
	PercentageOfNodesToScore int32
	// NoPreemption: never evict pods for a pod of higher priority
	// (--preemption=false). The preempt verb then lets kube-scheduler evict
	// nobody for a GPU pod either.
	NoPreemption bool
	// Timeouts of the HTTP server; zero fields take DefaultTimeouts'.
	Timeouts Timeouts

	// LeaderElect: standalone replicas behind one Service elect a leader with
	// the Lease Election names. Only the leader is ready and answers the verbs
	// (pkg/leader).
	LeaderElect bool
	// FollowSchedulerLease, "namespace/name": a sidecar serves only while the
	// kube-scheduler beside it holds this Lease, after a catch-up
	// (pkg/leader). The scheduler is named by Election.Identity, its pod name.
	FollowSchedulerLease string
	// Election: the Lease, this replica's identity and the durations. With
	// FollowSchedulerLease only Identity and RenewDeadline are read.
	Election leader.ElectConfig
}

// Timeouts bound how long a client may take over a request and hold an
// idle connection: net/http.Server's fields of the same names.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// DefaultTimeouts: a whole request (4 MiB at most) is read within 30 s. An
// answer is written within the bind's deadline and a margin. An idle
// keep-alive connection is closed after two minutes.
var DefaultTimeouts = Timeouts{ReadHeader: 10 * time.Second, Read: 30 * time.Second, Write: BindTimeout + 15*time.Second, Idle: 2 * time.Minute}

// Validate checks the configuration.
func (c *Config) Validate() error {
	if _, err := allocator.New(c.Policy, nil, nil); err != nil {
		return fmt.Errorf("--policy: %w", err)
	}
	if c.QPS <= 0 || c.Burst <= 0 {
		return fmt.Errorf("--kube-api-qps (%v) and --kube-api-burst (%d) must be positive", c.QPS, c.Burst)
	}
	var errs []error
	addrs := map[string]string{} // address -> flag
	for _, a := range []struct{ flag, addr string }{{"--listen", c.Listen}, {"--metrics-listen", c.MetricsListen}, {"--webhook-listen", c.WebhookListen}} {
		if a.addr == "" && a.flag != "--listen" {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", a.flag, a.addr, err))
		} else if other, dup := addrs[a.addr]; dup {
			errs = append(errs, fmt.Errorf("%s and %s are both %q; give each its own port", other, a.flag, a.addr))
		}
		addrs[a.addr] = a.flag
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-key-file go together"))
	}
	if c.ClientCAFile != "" && c.TLSCertFile == "" {
		errs = append(errs, errors.New("--client-ca-file needs --tls-cert-file and --tls-key-file: client certificates are checked over HTTPS"))
	}
	if c.Profiling && c.MetricsListen == "" {
		errs = append(errs, errors.New("--profiling needs --metrics-listen: the profiles are served there only, never on the extender API's listener"))
	}
	if c.ClientCAFile != "" && c.MetricsListen == "" {
		errs = append(errs, errors.New("--client-ca-file needs --metrics-listen: kubelet's probes and Prometheus present no client certificate, so /healthz, /readyz and /metrics must be served on a plain listener too"))
	}
	switch {
	case c.WebhookListen != "" && (c.WebhookTLSCertFile == "" || c.WebhookTLSKeyFile == ""):
		errs = append(errs, errors.New("--webhook-listen needs --webhook-tls-cert-file and --webhook-tls-key-file: the API server calls webhooks over HTTPS only"))
	case c.WebhookListen == "" && (c.WebhookTLSCertFile != "" || c.WebhookTLSKeyFile != ""):
		errs = append(errs, errors.New("--webhook-tls-cert-file and --webhook-tls-key-file need --webhook-listen"))
	}
	switch {
	case c.LeaderElect && c.FollowSchedulerLease != "":
		errs = append(errs, errors.New("--leader-elect and --follow-scheduler-lease exclude each other: the first is for standalone replicas behind a Service, the second for a sidecar of kube-scheduler"))
	case c.LeaderElect:
		if err := c.Election.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--leader-elect: %w", err))
		}
	case c.FollowSchedulerLease != "":
		if _, _, err := c.followed(); err != nil {
			errs = append(errs, err)
		}
		if c.Election.Identity == "" || c.Election.RenewDeadline <= 0 {
			errs = append(errs, fmt.Errorf("--follow-scheduler-lease needs --leader-elect-identity (the pod name, %q) and a positive --leader-elect-renew-deadline (%s)", c.Election.Identity, c.Election.RenewDeadline))
		}
	}
	if c.WebhookListen != "" {
		if err := webhook.ValidSchedulerName(c.SchedulerName); err != nil {
			errs = append(errs, fmt.Errorf("--scheduler-name: %w", err))
		}
	}
	if u := c.WebhookDRAUnit; c.DRANodeChoice && u != "" && u != gpushare.UnitGiB && u != gpushare.UnitMiB {
		errs = append(errs, fmt.Errorf("--webhook-dra-memory-unit %q: want %s or %s", u, gpushare.UnitGiB, gpushare.UnitMiB))
	}
	if c.WebhookDRANodeSelector != "" {
		if c.WebhookListen == "" {
			errs = append(errs, errors.New("--webhook-dra-node-selector needs --webhook-listen"))
		}
		if _, err := c.draConversion(nil, webhook.InformerQuotas{}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// draConversion is the webhook's DRA setting from WebhookDRANodeSelector
// and WebhookDRAUnit. Its templates are made through client, and the
// namespaces' ResourceQuotas read from quotas.
func (c *Config) draConversion(client kubernetes.Interface, quotas webhook.Quotas) (webhook.DRA, error) {
	labels := map[string]string{}
	for _, pair := range strings.Split(c.WebhookDRANodeSelector, ",") {
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return webhook.DRA{}, fmt.Errorf("--webhook-dra-node-selector %q: want KEY=VALUE[,KEY=VALUE...], e.g. gpushare.io/device-mode=dra; %q has no =", c.WebhookDRANodeSelector, pair)
		}
		if _, dup := labels[key]; dup {
			return webhook.DRA{}, fmt.Errorf("--webhook-dra-node-selector %q: label %s given twice", c.WebhookDRANodeSelector, key)
		}
		labels[key] = value
	}
	d := webhook.DRA{NodeSelector: labels, Unit: c.WebhookDRAUnit, NodeChoice: c.DRANodeChoice, Templates: webhook.ClientTemplates{Client: client}, Quotas: quotas}
	if err := d.Validate(); err != nil {
		return webhook.DRA{}, fmt.Errorf("--webhook-dra-node-selector/--webhook-dra-memory-unit: %w", err)
	}
	return d, nil
}

// followed splits FollowSchedulerLease into the Lease's namespace and name.
func (c *Config) followed() (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(c.FollowSchedulerLease, "/")
	if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("--follow-scheduler-lease %q: want namespace/name, e.g. kube-system/kube-scheduler", c.FollowSchedulerLease)
	}
	return namespace, name, nil
}

// NewClient builds the extender's API client from a kubeconfig path, ""
// for in-cluster.
func NewClient(kubeconfig string, qps float32, burst int) (kubernetes.Interface, error) {
	return kubeclient.New(kubeconfig, qps, burst, "gpushare-scheduler-extender")
}
