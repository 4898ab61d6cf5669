// Package nodeagent is a test double of the kubelet for a simulated GPU
// node, used by `make demo` and the end-to-end tests; it is not a kubelet
// and runs no containers.
//
// What it does, and what is real about it:
//
//   - registers the Node (Ready, cpu/memory/pods capacity, an InternalIP)
//     and heartbeats its Lease and Ready condition;
//   - hosts kubelet's OWN device manager (devicehost, i.e.
//     k8s.io/kubernetes/pkg/kubelet/cm/devicemanager v1.34.3) on the node's
//     plugin directory KubeletDir/device-plugins, and kubelet's PodResources
//     v1 API on KubeletDir/pod-resources/kubelet.sock, so the real device
//     plugin registers, lists and allocates over gRPC exactly as on a node;
//   - patches the node's capacity and allocatable of aliyun.com/gpu-mem
//     from the device manager (allocatable drops with unhealthy cards or a
//     dead plugin, as kubelet's does);
//   - watches the pods bound to the node and admits each through the device
//     manager (Allocate for every container, init containers first, pods of
//     one batch in creation order, as kubelet's HandlePodAdditions does);
//     an admission error fails the pod with kubelet's reason
//     UnexpectedAdmissionError;
//   - records what each container got under test-only pod annotations
//     (AnnotationEnv, AnnotationDevices), then marks the pod Running;
//   - on deletion releases the pod's devices and removes the pod (grace 0),
//     as kubelet does once containers have stopped;
//   - on Config.Restart restarts the device manager, which re-creates
//     kubelet.sock as a kubelet restart does.
//
// Not simulated: images, processes, volumes, probes, cgroups, eviction.
// Pods already on the node when the agent starts are admitted again (their
// devices from a previous agent are not restored).
package nodeagent
