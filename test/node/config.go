package node

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// layout is where the node's files go under one data directory (DataDir;
// tests render the configuration for another).
type layout struct {
	data string
}

func (l layout) containerdRoot() string   { return filepath.Join(l.data, "containerd", "root") }
func (l layout) containerdState() string  { return filepath.Join(l.data, "containerd", "state") }
func (l layout) containerdSocket() string { return filepath.Join(l.data, "containerd.sock") }
func (l layout) containerdConfig() string { return filepath.Join(l.data, "containerd.toml") }

// runcRoot is runc's state directory for containerd's runc shims; its
// subdirectory per containerd namespace holds one directory per container.
func (l layout) runcRoot() string      { return filepath.Join(l.data, "runc") }
func (l layout) cniConfDir() string    { return filepath.Join(l.data, "cni", "net.d") }
func (l layout) cniIPAMDir() string    { return filepath.Join(l.data, "cni", "ipam") }
func (l layout) podLogsDir() string    { return filepath.Join(l.data, "pod-logs") }
func (l layout) kubeletConfig() string { return filepath.Join(l.data, "kubelet.yaml") }
func (l layout) proxyConfig() string   { return filepath.Join(l.data, "kube-proxy.yaml") }
func (l layout) volumePlugins() string { return filepath.Join(l.data, "volume-plugins") }
func (l layout) criEndpoint() string   { return "unix://" + l.containerdSocket() }
func (l layout) cniConfFile() string {
	return filepath.Join(l.cniConfDir(), "10-gpushare-node.conflist")
}
func (l layout) containerdOpt() string { return filepath.Join(l.data, "containerd", "opt") }

// CRINamespace is the containerd namespace of the CRI plugin: kubelet's
// images and containers.
const CRINamespace = "k8s.io"

// containerdConfig is containerd 1.6's configuration (version 2): its own
// root, state and socket under the layout; the CRI plugin with sandboxImage
// (already imported: no registry), runc through the v2 shim with cgroupfs
// and its state under the layout, Debian's CNI plugins with our conflist.
//
// netns_mounts_under_state_dir keeps the pods' network namespaces under
// the layout too, not in /run/netns.
//
// restrict_oom_score_adj: containerd runs as root here but the pause
// container asks an oom_score_adj below containerd's own, which the
// kernel refuses unless capped at containerd's (without it every sandbox
// fails with "runc create failed: ... can't get final child's PID from
// pipe: EOF").
func (l layout) containerdConfigTOML(sandboxImage string) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return fmt.Sprintf(`# Written by test/node for the real node's containerd; removed at teardown.
version = 2
root = %[1]s
state = %[2]s

[grpc]
  address = %[3]s

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]s

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]s
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[6]s
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[7]s
    conf_dir = %[8]s
    max_conf_num = 1
`, q(l.containerdRoot()), q(l.containerdState()), q(l.containerdSocket()), q(l.containerdOpt()),
		q(sandboxImage), q(l.runcRoot()), q(CNIBinDir), q(l.cniConfDir()))
}

// containerd2ConfigTOML is containerd 2.x's configuration (version 3), the
// same as containerdConfigTOML's where the two have the same settings; the
// CRI plugin is split into runtime and images, the sandbox image is a
// pinned image, the runc shim is the one built with this containerd
// (shimPath, not Debian's on PATH), and CDI devices are applied from the
// default spec directories (/etc/cdi, /var/run/cdi: always on in 2.x).
func (l layout) containerd2ConfigTOML(sandboxImage, shimPath string) string {
	q := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	return fmt.Sprintf(`# Written by test/node for the real node's containerd 2; removed at teardown.
version = 3
root = %[1]s
state = %[2]s

[grpc]
  address = %[3]s

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[4]s

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      runtime_path = %[5]s
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        Root = %[6]s
        SystemdCgroup = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[7]s]
    conf_dir = %[8]s
    max_conf_num = 1
`, q(l.containerdRoot()), q(l.containerdState()), q(l.containerdSocket()), q(sandboxImage),
		q(shimPath), q(l.runcRoot()), q(CNIBinDir), q(l.cniConfDir()))
}

// cniConflist is the pod network: a bridge (BridgeName, the gateway) with
// host-local addresses from PodCIDR, and portmap. No masquerade: pods talk
// to this machine (the API server, kubelet) and to each other only.
// containerd adds the loopback interface itself (the loopback plugin).
func (l layout) cniConflist() string {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "gpushare-node",
		"plugins": []any{
			map[string]any{
				"type":        "bridge",
				"bridge":      BridgeName,
				"isGateway":   true,
				"ipMasq":      false,
				"hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  []any{[]any{map[string]any{"subnet": PodCIDR}}},
					"routes":  []any{map[string]any{"dst": "0.0.0.0/0"}},
					"dataDir": l.cniIPAMDir(),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		},
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return string(b) + "\n"
}

// KubeletPort is kubelet's API port on the node's address.
const KubeletPort = 10250

// kubeletHealthz is kubelet's healthz endpoint (loopback).
const kubeletHealthz = "http://127.0.0.1:10248/healthz"

// kubeletConfigYAML is the KubeletConfiguration of a throwaway test node:
// anonymous, always-allow API (the apiserver's logs and exec need no
// client certificate), cgroupfs on the machine's cgroup v1 (failCgroupV1:
// false, which 1.35 needs), swap allowed, no node-allocatable
// enforcement, no eviction and no image garbage collection (a shared
// machine's disk and memory are not the node's to police, and the
// imported images cannot be pulled again), logs and volume plugins under
// the layout.
func (l layout) kubeletConfigYAML(address string) string {
	return fmt.Sprintf(`# Written by test/node for the real node's kubelet; removed at teardown.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
enforceNodeAllocatable: []
containerRuntimeEndpoint: %[3]s
imageServiceEndpoint: %[3]s
evictionHard:
  imagefs.available: "0%%"
  imagefs.inodesFree: "0%%"
  memory.available: "0%%"
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
podLogsDir: %[4]s
volumePluginDir: %[5]s
resolvConf: /etc/resolv.conf
serializeImagePulls: false
`, address, KubeletPort, l.criEndpoint(), l.podLogsDir(), l.volumePlugins())
}

// proxyMetricsAddr and proxyHealthzAddr are kube-proxy's listeners
// (loopback).
const (
	proxyMetricsAddr = "127.0.0.1:10249"
	proxyHealthzAddr = "127.0.0.1:10256"
)

// proxyConfigYAML is kube-proxy's configuration: iptables mode, node
// name, the pod CIDR (traffic from elsewhere to a Service is masqueraded)
// and no changes to the machine's conntrack sysctls or to
// route_localnet (no NodePorts on localhost).
func (l layout) proxyConfigYAML(kubeconfig, nodeName string) string {
	return fmt.Sprintf(`# Written by test/node for the real node's kube-proxy; removed at teardown.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
mode: iptables
hostnameOverride: %[2]s
clusterCIDR: %[3]s
metricsBindAddress: %[4]s
healthzBindAddress: %[5]s
iptables:
  localhostNodePorts: false
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`, kubeconfig, nodeName, PodCIDR, proxyMetricsAddr, proxyHealthzAddr)
}

// nodeLabels is kubelet's --node-labels value, keys sorted.
func nodeLabels(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	return strings.Join(parts, ",")
}
