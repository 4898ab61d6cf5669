// Package extender serves the kube-scheduler extender HTTP API (filter,
// prioritize, bind) and the inspect, health and metrics endpoints, on top
// of the allocation cache.
//
// Wire contract (k8s.io/kube-scheduler/extender/v1): every reply is HTTP
// 200 with the verb's result type; a logical failure (bad request, pod
// without gpu-mem, no fit at bind) goes in its Error field, because the
// scheduler treats any other status as a transport failure. Filter and
// prioritize make no API calls. The scheduler must be configured with
// nodeCacheCapable: true (see config/kube-scheduler-config.yaml); a filter
// request carrying whole Nodes (nodeCacheCapable: false) is answered with the
// Nodes that pass, since such a scheduler reads only those.
//
// Filter decides the node (HandlersConfig.FilterAll false, the default): of the
// nodes where the pod fits it passes only those prioritize would rate
// highest, so kube-scheduler's own scores (which spread pods, e.g. the
// default topology spreading and LeastAllocated) only break ties among them
// and cannot undo the packing the policy chose; with one node left the
// scheduler skips scoring, which saves one of the two HTTP round trips per
// pod. Nodes left out are not reported failed: they fit. With FilterAll,
// filter passes every node that fits and prioritize's 0..10 scores (times
// the configured weight) are added to the scheduler's.
//
// Bind: the cache chooses the cards and holds them as assumed (under its
// lock, no API call); the binder then creates the pod's Binding carrying the
// allocation annotations, which the API server applies together with
// spec.nodeName in one update guarded by the pod's UID, under the bind's own
// deadline (BindTimeout), not the scheduler's request's. On a conflict it
// re-reads the pod. A refusal releases the cards; an answer that may hide a
// Binding the API server made (none at all, a timeout, a 5xx) makes it read
// the pod back, and the cards stay held while the outcome is unknown (see
// Binder.bind). A retried bind of a
// pod already bound to that node succeeds without holding anything twice.
//
// Serving (Extender.Run): the API on Config.Listen, over HTTPS with a certificate
// reloaded from disk when Config.TLSCertFile is set, and then taking only
// client certificates of Config.ClientCAFile's CAs (pkg/certs); the probes
// and metrics alone on a plain listener, Config.MetricsListen, which
// kubelet and Prometheus reach without a client certificate; the
// scheduler-name webhook (pkg/webhook) on Config.WebhookListen. /metrics
// writes the per-card gauges straight from the cache at scrape time
// (serveMetrics).
//
// Several replicas (Config.LeaderElect, Config.FollowSchedulerLease): a
// leader.Gate decides. HandlersConfig.Leader answers the verbs 503 with
// Retry-After on a replica that does not serve (and, for elected
// replicas, /readyz too); BinderConfig.Fence bounds each Binding write to the
// replica's term. Run starts the election only once the informers have
// synced. See pkg/leader for the safety argument.
package extender
