// Package framework starts a real etcd, kube-apiserver and kube-scheduler on loopback for integration tests.
//
// The three binaries are built from Go modules, not downloaded: the pinned
// tool modules test/tools/etcd, test/tools/k8s-v1.37 and
// test/tools/k8s-v1.34 name exact versions (EtcdVersion, KubernetesVersion,
// the default, and KubernetesVersionOldest), and EnsureBinaries runs
// `go build` in them. The results are cached in $GPUSHARE_CACHE_DIR if set, otherwise in
// ${XDG_CACHE_HOME:-$HOME/.cache}/gpushare/controlplane/<versions>/, so only
// the first run pays for the build (kube-apiserver alone takes about ten
// minutes cold on two cores). Concurrent builds, for instance from parallel
// test packages, are serialised by a file lock in that directory. Build them
// ahead of time with `go run ./test/cmd/controlplane build`, and set
// GPUSHARE_SKIP_BUILD=1 to make a missing binary an error instead of a build.
//
// Every child process, the control plane's and those of the tests (the
// extender binary, test/kubelet's simulated nodes), is a Proc: its own
// process group, killed with the test binary on Linux.
//
// Options.Nodes (NodeAccess) makes a control plane that a real node
// (test/node) and its pods can use: kube-apiserver reachable from the pods'
// network through the kubernetes Service, service-account tokens mounted,
// and kube-controller-manager running the workload controllers. Its
// binary, kubelet's and kube-proxy's are NodeBinaries, built the same way
// into the same cache (EnsureNodeBinaries).
//
// Options.SchedulerHA starts kube-scheduler as replicas that elect a leader
// on one Lease, each in its own UTS namespace with its own host name (its
// identity in the Lease is HOST_UUID), each calling its own extender URL:
// the sidecar topology. SchedulerLeader reads which replica holds the Lease.
package framework
