// Package cluster runs a whole gpushare cluster on one machine for `make
// demo` and the end-to-end tests: a real etcd, kube-apiserver and
// kube-scheduler (framework), the extender process as its service account,
// and simulated GPU nodes, each a node agent (kubelet's own device manager)
// plus our real device plugin process with --fake-gpus, as its service
// account with a token bound to a pod on its node (as a DaemonSet pod's),
// under the RBAC and admission policies of manifests/. Every process is a
// child in its own process group that dies with its parent; Stop ends them
// all. Config.SchedulerReplicas runs the sidecar topology of high
// availability instead of one kube-scheduler and one extender: replicas
// electing a leader, each with its own host name and extender sidecar
// following the Lease (Leader says which leads). Rows and CheckCards
// compare what the extender chose with what each container got.
package cluster
