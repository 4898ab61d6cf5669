package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// kubeletVersion is what the node reports: the device manager's version,
// marked as this test double.
const kubeletVersion = "v1.34.3-gpushare-nodeagent"

// reasonAdmission is kubelet's pod status reason and event reason when the
// device manager fails an admission (pkg/kubelet/lifecycle/predicate.go).
const reasonAdmission = "UnexpectedAdmissionError"

// register creates the node (an existing one is taken over) and writes its
// status: capacity, Ready, addresses, versions.
func (a *agent) register(ctx context.Context) error {
	labels := map[string]string{
		"kubernetes.io/hostname": a.cfg.NodeName,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		LabelSimulated:           "true",
	}
	for k, v := range a.cfg.Labels {
		labels[k] = v
	}
	a.readySince = metav1.Now()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Labels: labels}}
	if _, err := a.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("registering node %s: %w", a.cfg.NodeName, err)
	}
	status := corev1.NodeStatus{
		Capacity:    a.cfg.Capacity,
		Allocatable: a.cfg.Capacity,
		Conditions:  []corev1.NodeCondition{a.readyCondition()},
		NodeInfo: corev1.NodeSystemInfo{
			KubeletVersion: kubeletVersion, OperatingSystem: "linux", Architecture: "amd64",
			ContainerRuntimeVersion: "none://nodeagent",
		},
	}
	if a.cfg.Address != "" {
		status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: a.cfg.Address}, {Type: corev1.NodeHostName, Address: a.cfg.NodeName}}
	}
	if err := a.patchNodeStatus(ctx, status); err != nil {
		return fmt.Errorf("registering node %s: %w", a.cfg.NodeName, err)
	}
	return nil
}

// readyCondition is Ready since the agent registered, heartbeat now.
func (a *agent) readyCondition() corev1.NodeCondition {
	return corev1.NodeCondition{
		Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
		Message:           "gpushare node agent (test double) is posting ready status",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: a.readySince,
	}
}

// patchNodeStatus strategic-merges status into the node's status: map keys
// (capacity) and list entries keyed by type (conditions, addresses) that it
// does not name are left alone, so what the device plugin publishes stays.
func (a *agent) patchNodeStatus(ctx context.Context, status corev1.NodeStatus) error {
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return fmt.Errorf("encoding the node status: %w", err)
	}
	if _, err := a.client.CoreV1().Nodes().Patch(ctx, a.cfg.NodeName, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("patching the status of node %s: %w", a.cfg.NodeName, err)
	}
	return nil
}

// heartbeat renews the node's Lease and Ready condition every
// HeartbeatPeriod, as kubelet's node lease controller and status loop do.
func (a *agent) heartbeat(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(a.cfg.HeartbeatPeriod)
	defer t.Stop()
	for {
		if err := a.renewLease(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Renewing the node lease")
		}
		if err := a.patchNodeStatus(ctx, corev1.NodeStatus{Conditions: []corev1.NodeCondition{a.readyCondition()}}); err != nil && ctx.Err() == nil {
			logger.Error(err, "Posting the Ready condition")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (a *agent) renewLease(ctx context.Context) error {
	leases := a.client.CoordinationV1().Leases(corev1.NamespaceNodeLease)
	now := metav1.NewMicroTime(time.Now())
	lease, err := leases.Get(ctx, a.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		holder, duration := a.cfg.NodeName, int32(leaseDurationSeconds)
		lease = &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: a.cfg.NodeName, Namespace: corev1.NamespaceNodeLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &duration, RenewTime: &now},
		}
		_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// syncCapacity keeps the node's capacity and allocatable of
// aliyun.com/gpu-mem equal to the device manager's: all registered devices
// and the healthy ones.
func (a *agent) syncCapacity(ctx context.Context) {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(a.cfg.SyncPeriod)
	defer t.Stop()
	lastCap, lastAlloc := int64(-1), int64(-1)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		capacity, alloc := a.host.Capacity(string(gpushare.ResourceGPUMem))
		if capacity == lastCap && alloc == lastAlloc {
			continue
		}
		st := corev1.NodeStatus{
			Capacity:    corev1.ResourceList{gpushare.ResourceGPUMem: *resource.NewQuantity(capacity, resource.DecimalSI)},
			Allocatable: corev1.ResourceList{gpushare.ResourceGPUMem: *resource.NewQuantity(alloc, resource.DecimalSI)},
		}
		if err := a.patchNodeStatus(ctx, st); err != nil {
			if ctx.Err() == nil {
				logger.Error(err, "Updating the node's GPU memory")
			}
			continue
		}
		logger.Info("Node GPU memory from kubelet's device manager", "resource", gpushare.ResourceGPUMem, "capacity", capacity, "allocatable", alloc)
		lastCap, lastAlloc = capacity, alloc
	}
}

// runningStatus is the status kubelet posts once every container runs:
// init containers completed (sidecars running), app containers running and
// ready.
func runningStatus(pod *corev1.Pod, hostIP string) corev1.PodStatus {
	now := metav1.Now()
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	st := corev1.PodStatus{
		Phase:     corev1.PodRunning,
		StartTime: &now,
		Conditions: []corev1.PodCondition{
			cond(corev1.PodReadyToStartContainers), cond(corev1.PodInitialized), cond(corev1.ContainersReady),
			cond(corev1.PodReady), cond(corev1.PodScheduled),
		},
	}
	if hostIP != "" {
		st.HostIP, st.HostIPs = hostIP, []corev1.HostIP{{IP: hostIP}}
	}
	id := func(c string) string { return "nodeagent://" + string(pod.UID) + "/" + c }
	for _, c := range pod.Spec.InitContainers {
		cs := corev1.ContainerStatus{Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: id(c.Name)}
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			started := true
			cs.Ready, cs.Started, cs.State.Running = true, &started, &corev1.ContainerStateRunning{StartedAt: now}
		} else {
			cs.State.Terminated = &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed", StartedAt: now, FinishedAt: now}
		}
		st.InitContainerStatuses = append(st.InitContainerStatuses, cs)
	}
	for _, c := range pod.Spec.Containers {
		started := true
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, ContainerID: id(c.Name), Ready: true, Started: &started,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return st
}

// rejectedStatus is kubelet's status for a pod the device manager refused.
func rejectedStatus(pod *corev1.Pod, err error) corev1.PodStatus {
	return corev1.PodStatus{
		Phase:   corev1.PodFailed,
		Reason:  reasonAdmission,
		Message: fmt.Sprintf("Allocate failed due to %v, which is unexpected", err),
		// Keep the scheduler's condition; merge patch replaces the list.
		Conditions: pod.Status.Conditions,
	}
}
