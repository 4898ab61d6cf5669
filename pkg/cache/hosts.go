package cache

import (
	"hash/maphash"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// setHost records that uid holds milliCPU and memMiB on node, replacing
// what it held; assumed marks an assumed allocation. The caller holds c.mu.
func (c *Cache) setHost(uid types.UID, node string, milliCPU, memMiB int64, assumed bool) {
	ns := c.nodeState(node)
	h := hostUse{ns: ns, milliCPU: milliCPU, memMiB: memMiB, assumed: assumed}
	if old, ok := c.hosts[uid]; ok {
		if old == h {
			return
		}
		c.dropHost(uid)
	}
	c.hosts[uid] = h
	c.touch(ns)
	c.addHost(ns, -1)
	ns.reqMilliCPU += h.milliCPU
	ns.reqMemMiB += h.memMiB
	ns.hostPods++
	c.addHost(ns, 1)
}

// addHost adds (sign 1) or takes away (sign −1) ns's free CPU in the holes'
// FreeMilliCPU, if ns has cards and reports its CPU. Call it with −1 before
// changing the node's cards, CPU or requests, and with 1 after. The caller
// holds c.mu.
func (c *Cache) addHost(ns *nodeState, sign int) {
	if ns.hostKnown && len(ns.node.Cards) > 0 {
		c.holes.AddHost(ns.allocMilliCPU-ns.reqMilliCPU, sign)
	}
}

// observeCPUOnly feeds the workload model, once per pod, the CPU of a pod
// that asks no GPU memory and is bound to a node with cards. Such a pod
// shares that node's CPU with GPU pods (workload.Workload.CPUPerUnit). The
// caller holds c.mu.
func (c *Cache) observeCPUOnly(pod *kubeinfo.PodInfo) {
	if pod.Demand != nil || pod.ClaimPod || pod.NodeName == "" || pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed {
		return
	}
	key := c.observedKey(pod.UID)
	if _, seen := c.observed[key]; seen {
		return
	}
	if ns, ok := c.nodes[pod.NodeName]; !ok || len(ns.node.Cards) == 0 {
		return
	}
	c.observed[key] = struct{}{}
	c.workload.ObserveCPUOnly(pod.MilliCPU)
	c.workloadDirty = true
}

// observedKey is uid's key in c.observed.
func (c *Cache) observedKey(uid types.UID) uint64 { return maphash.String(c.observedSeed, string(uid)) }

// dropHost forgets what uid holds on its node, if anything. The caller holds c.mu.
func (c *Cache) dropHost(uid types.UID) {
	h, ok := c.hosts[uid]
	if !ok {
		return
	}
	delete(c.hosts, uid)
	ns := h.ns
	c.touch(ns)
	c.addHost(ns, -1)
	ns.reqMilliCPU -= h.milliCPU
	ns.reqMemMiB -= h.memMiB
	ns.hostPods--
	c.addHost(ns, 1)
}

// syncHost brings the pod's hosts entry in line with pod and with its
// allocation in c.pods. The caller holds c.mu.
func (c *Cache) syncHost(pod *kubeinfo.PodInfo) {
	switch {
	case pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed:
		c.dropHost(pod.UID)
	case pod.NodeName != "":
		c.setHost(pod.UID, pod.NodeName, pod.MilliCPU, pod.MemoryMiB, false)
	default:
		if ps, ok := c.pods[pod.UID]; ok && (ps.state == StateAssumed || ps.state == StateReserved) {
			c.setHost(pod.UID, ps.node, pod.MilliCPU, pod.MemoryMiB, true)
			return
		}
		c.dropHost(pod.UID)
	}
}
