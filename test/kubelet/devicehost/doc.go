// Package devicehost runs kubelet's own device manager
// (k8s.io/kubernetes/pkg/kubelet/cm/devicemanager, v1.34.3) on a plugin
// directory of the caller's choice, so that a device plugin is registered,
// listed and asked to allocate over real gRPC exactly as kubelet does it:
// Start(pluginDir), Admit(pod) for each pod (returning every container's
// environment, annotations, mounts and CDI devices as kubelet hands them to
// the runtime), Remove(pod), Restart() for a kubelet restart, and kubelet's
// PodResources v1 API on a socket of the caller's choice.
package devicehost
