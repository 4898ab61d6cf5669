// Package node runs one real Kubernetes node on this machine for tests:
// containerd and runc from Debian, CNI bridge networking with Debian's
// plugins, and a kubelet and kube-proxy built from Go modules at the
// control plane's version (framework.EnsureNodeBinaries), joined to a
// control plane of test/integration/framework started with
// framework.NodeAccess.
//
// It needs root and Linux, and installs what is missing with apt-get
// (EnsureHost). There is one node per machine: kubelet's device manager
// always serves /var/lib/kubelet/device-plugins/kubelet.sock, whatever its
// root directory, so the node uses /var/lib/kubelet, and a lock file
// (LockPath) keeps a second node off the machine while one runs: another
// test binary waits for it, except for `make node-demo`'s, which runs
// until make node-demo-down (TakeLock).
//
// Everything else the node writes is under DataDir. Stop, and Start before
// it begins (after a node that was not stopped, e.g. a killed test binary),
// tears the node down completely: every pod sandbox is stopped and removed
// through the CRI (which runs the CNI teardown), every process started for
// the node is stopped, the shims and containers left by a containerd that
// died are killed, everything mounted under kubelet's and containerd's
// directories is unmounted, the iptables chains kube-proxy and kubelet
// made are removed (those the machine had before stay), the bridge is
// deleted, kubelet's cgroups are removed, the sysctls the
// node changed get their old values back, and the directories the node
// created are removed.
//
// No registry is reachable: the pause image and the test images are built
// here (BuildImages) and imported into containerd before kubelet starts.
package node
