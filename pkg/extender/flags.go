package extender

import (
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/leader"
	"github.com/gpushare/gpushare/pkg/webhook"
)

// ParseFlags reads the extender's command line, without the program name,
// into a Config. Usage and errors go to out. The command and the tests that
// run the Helm chart's arguments share it, so both read the same flags.
func ParseFlags(args []string, out io.Writer) (cfg Config, showVersion bool, err error) {
	fs := flag.NewFlagSet("gpushare-scheduler-extender", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "path of a kubeconfig; empty: in-cluster configuration")
	fs.StringVar(&cfg.Listen, "listen", DefaultListen, "listen address for the extender API and inspect, plus /healthz, /readyz, /version and /metrics; loopback by default (kube-scheduler beside the extender): anyone who reaches it can bind pending GPU pods and read every GPU pod through inspect")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "serve --listen over HTTPS with this PEM certificate (with --tls-key-file); both are reloaded when they change on disk, for new connections")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.StringVar(&cfg.ClientCAFile, "client-ca-file", "", "with --tls-cert-file: accept on --listen only clients presenting a certificate signed by a CA in this PEM bundle (kube-scheduler's tlsConfig certFile); reloaded when it changes; needs --metrics-listen for probes and Prometheus")
	fs.StringVar(&cfg.MetricsListen, "metrics-listen", "", "also serve /healthz, /readyz, /version and /metrics over plain HTTP on this address (e.g. :39998), for kubelet's probes and Prometheus; empty: only on --listen")
	fs.BoolVar(&cfg.Profiling, "profiling", false, "serve Go's CPU, heap and goroutine profiles at /debug/pprof/ on --metrics-listen (needs it); off by default")
	fs.StringVar(&cfg.WebhookListen, "webhook-listen", "", "serve the mutating webhook that sets spec.schedulerName on pods asking aliyun.com/gpu-mem at POST "+webhook.Path+" over HTTPS on this address (e.g. :9443); empty: off")
	fs.StringVar(&cfg.WebhookTLSCertFile, "webhook-tls-cert-file", "", "PEM certificate of --webhook-listen, reloaded when it changes")
	fs.StringVar(&cfg.WebhookTLSKeyFile, "webhook-tls-key-file", "", "PEM private key of --webhook-tls-cert-file")
	fs.StringVar(&cfg.WebhookDRANodeSelector, "webhook-dra-node-selector", "", "KEY=VALUE[,KEY=VALUE...], the labels of the gpushare DRA driver's nodes (e.g. gpushare.io/device-mode=dra): the webhook also converts pods asking aliyun.com/gpu-mem that select every one of them (each by spec.nodeSelector, or by every term of their required node affinity) into pods asking the same memory through a resource claim, creating the ResourceClaimTemplate gpushare-gpu-mem-<size> in their namespace when missing, and refuses, with the reason, those it cannot convert (gpu-mem in two containers or on several cards); needs --webhook-listen; empty: off")
	fs.StringVar(&cfg.WebhookDRAUnit, "webhook-dra-memory-unit", gpushare.UnitGiB, "the unit of aliyun.com/gpu-mem in pods the webhook converts to claims (--webhook-dra-node-selector), and the unit --dra-node-choice counts the DRA nodes' memory in: GiB or MiB")
	fs.BoolVar(&cfg.DRANodeChoice, "dra-node-choice", false, "rate the nodes of claim pods of the gpushare DRA driver as for aliyun.com/gpu-mem pods (the policy, on the card kube-scheduler's first fit gives the claim there): filter answers for pods asking the marker resource "+string(gpushare.ResourceDRAClaim)+", which kube-scheduler's configuration must list under the extender's managedResources with ignoredByScheduler (config/kube-scheduler-config.yaml), and the webhook's conversion adds it; the extender watches ResourceSlices and ResourceClaims (resource.k8s.io/v1)")
	fs.StringVar(&cfg.SchedulerName, "scheduler-name", webhook.DefaultSchedulerName, "the spec.schedulerName the webhook gives pods asking aliyun.com/gpu-mem whose schedulerName is empty or default-scheduler")
	fs.StringVar(&cfg.Policy, "policy", allocator.DefaultPolicy, fmt.Sprintf("default scoring policy, one of %v; a pod may override it with the annotation gpushare.io/policy", allocator.PolicyNames()))
	qps := fs.Float64("kube-api-qps", 100, "API client queries per second (client-go's default of 5 would throttle binds to a few pods per second)")
	fs.IntVar(&cfg.Burst, "kube-api-burst", 200, "API client burst")
	fs.DurationVar(&cfg.AssumeTTL, "assume-ttl", cache.DefaultAssumeTTL, "how long cards stay held for a bind that never completed (or whose outcome is unknown), and for a Binding the informer never shows")
	filterBest := fs.Bool("filter-best", true, "filter passes only the nodes prioritize would rate highest, so the extender's choice of node decides and kube-scheduler's own scores only break ties (the scheduler skips scoring when one node is left); false: filter passes every node that fits and prioritize's scores are added to the scheduler's")
	preemption := fs.Bool("preemption", true, "evict, through the Eviction API, the lower-priority pods of one card for a pending GPU pod that fits no node otherwise (PodDisruptionBudgets and grace periods honoured; the room kept for the pod); kube-scheduler's preemptVerb must name the extender's preempt verb, which refuses kube-scheduler's own preemption by node totals; false: nobody is evicted for a GPU pod's memory")
	percentage := fs.Int("percentage-of-nodes-to-score", 0, "kube-scheduler's percentageOfNodesToScore (0 to 100; 0 is its adaptive default, as config/kube-scheduler-config.yaml ships): with it and the cluster's size the extender tells whether kube-scheduler may have stopped filtering before it found every node that fits, and then evicts nobody while a node it did not send could take the pod")
	fs.BoolVar(&cfg.LeaderElect, "leader-elect", false, "standalone replicas behind one Service: elect a leader with a coordination.k8s.io Lease; only the leader reports ready on /readyz (so the Service routes to it) and answers filter, prioritize and bind, after reading every bound pod from the API; the others answer them 503 with Retry-After")
	fs.StringVar(&cfg.FollowSchedulerLease, "follow-scheduler-lease", "", "sidecar of a kube-scheduler with leader election: the Lease it holds, namespace/name (e.g. kube-system/kube-scheduler); the extender answers the verbs only while the holder is its own pod's scheduler (identity --leader-elect-identity or --leader-elect-identity_*), after reading every bound pod from the API; /readyz does not depend on it")
	fs.StringVar(&cfg.Election.Namespace, "leader-elect-resource-namespace", "kube-system", "namespace of the --leader-elect Lease")
	fs.StringVar(&cfg.Election.Name, "leader-elect-resource-name", "gpushare-scheduler-extender", "name of the --leader-elect Lease")
	fs.StringVar(&cfg.Election.Identity, "leader-elect-identity", defaultIdentity(), "this replica's identity in the Lease: the pod name (from $POD_NAME, else the host name, which is the pod name in a pod)")
	fs.DurationVar(&cfg.Election.LeaseDuration, "leader-elect-lease-duration", leader.DefaultLeaseDuration, "how long a follower waits after the last renewal it saw before it takes the Lease")
	fs.DurationVar(&cfg.Election.RenewDeadline, "leader-elect-renew-deadline", leader.DefaultRenewDeadline, "the leader gives up when it could not renew for this long, and every Binding it writes ends by its last renewal plus this; must be below the lease duration, the difference being the safety margin. With --follow-scheduler-lease: set it to kube-scheduler's leaderElection.renewDeadline")
	fs.DurationVar(&cfg.Election.RetryPeriod, "leader-elect-retry-period", leader.DefaultRetryPeriod, "how often the leader renews and followers try to acquire")
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	klog.InitFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nServes the kube-scheduler extender verbs filter, prioritize, preempt and bind under /gpushare-scheduler,\nplus GET /gpushare-scheduler/inspect[/NODE]. The gpushare-simulate program replays a trace with\neach policy to help choose one. Flags:\n", fs.Name())
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	cfg.QPS = float32(*qps)
	cfg.FilterAll = !*filterBest
	cfg.NoPreemption = !*preemption
	if *percentage < 0 || *percentage > 100 {
		return cfg, false, fmt.Errorf("--percentage-of-nodes-to-score %d: want 0 (adaptive) to 100", *percentage)
	}
	cfg.PercentageOfNodesToScore = int32(*percentage) //nolint:gosec // G115: checked to be 0..100 above
	return cfg, showVersion, nil
}

// defaultIdentity is this replica's identity in a Lease: $POD_NAME (the
// downward API), else the host name, which in a pod is the pod name.
func defaultIdentity() string {
	if name := os.Getenv("POD_NAME"); name != "" {
		return name
	}
	host, _ := os.Hostname()
	return host
}
