// Package extender serves the kube-scheduler extender HTTP API (filter,
// prioritize, bind) and the inspect, health and metrics endpoints, on top
// of the allocation cache.
//
// Wire contract (k8s.io/kube-scheduler/extender/v1): every reply is HTTP
// 200 with the verb's result type. A logical failure (bad request, pod
// without gpu-mem, no fit at bind) goes in its Error field, because the
// scheduler treats any other status as a transport failure. Filter and
// prioritize make no API calls. The scheduler must be configured with
// nodeCacheCapable: true (see config/kube-scheduler-config.yaml). A filter
// request carrying whole Nodes (nodeCacheCapable: false) is answered with
// the Nodes that pass, since such a scheduler reads only those.
//
// Filter decides the node (HandlersConfig.FilterAll false, the default).
// Of the nodes where the pod fits, it passes only those prioritize would
// rate highest. kube-scheduler's own scores spread pods (the default
// topology spreading, LeastAllocated). Now they only break ties among the
// nodes passed, and cannot undo the packing the policy chose. With one node
// left the scheduler skips scoring, which saves one of the two HTTP round
// trips per pod. Nodes left out are not reported failed: they fit. With
// FilterAll, filter passes every node that fits, and prioritize's 0..10
// scores (times the configured weight) are added to the scheduler's.
//
// Bind: the cache chooses the cards and holds them as assumed, under its
// lock and with no API call. The binder then creates the pod's Binding,
// which carries the allocation annotations, under the bind's own deadline
// (BindTimeout). Binder.bind says how each answer is handled, and
// docs/design/binding-and-ha.md why a card is never handed out twice.
//
// Extender.Run serves the API on Config.Listen, over HTTPS with client
// certificates when configured (pkg/certs). The probes and metrics have a
// plain listener of their own (Config.MetricsListen), and the webhook
// another (Config.WebhookListen). With several replicas, a leader.Gate
// decides which one answers the verbs and binds (pkg/leader).
package extender
