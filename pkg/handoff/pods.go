package handoff

import (
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// managedAnnotations are the pod annotations the plugin writes.
var managedAnnotations = []string{gpushare.AnnotationAllocation, gpushare.AnnotationAssigned,
	gpushare.AnnotationIndex, gpushare.AnnotationDevMem, gpushare.AnnotationPodMem}

// UpsertPod applies a pod add or update from the informer.
func (h *Handoff) UpsertPod(pod *corev1.Pod) { h.upsert(pod, false) }

// upsert applies pod and reports whether it added or changed a pod entry.
// With onlyNew it applies only a GPU pod of this node whose UID the handoff
// does not know: catchUp's read may be older than what the informer
// delivered since.
func (h *Handoff) upsert(pod *corev1.Pod, onlyNew bool) bool {
	demand, derr := gpushare.PodDemand(pod)
	key := pod.Namespace + "/" + pod.Name
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if errors.Is(derr, gpushare.ErrNoGPUMem) || pod.Spec.NodeName != h.node || terminal {
		if onlyNew {
			return false
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.deletePod(pod.UID)
		return false
	}
	// Read the annotations (the allocation is JSON) before locking:
	// checkAllocation reads only fields that never change.
	e := &podEntry{uid: pod.UID, namespace: pod.Namespace, name: pod.Name, annotations: map[string]string{}}
	for _, k := range managedAnnotations {
		if v, ok := pod.Annotations[k]; ok {
			e.annotations[k] = v
		}
	}
	e.assumeTime, _ = strconv.ParseInt(pod.Annotations[gpushare.AnnotationAssumeTime], 10, 64)
	e.index = -1
	if idx, err := strconv.Atoi(pod.Annotations[gpushare.AnnotationIndex]); err == nil && idx >= 0 {
		e.index = idx
	}
	e.devMem, _ = strconv.ParseInt(pod.Annotations[gpushare.AnnotationDevMem], 10, 64)
	e.admitted = pod.Status.Phase == corev1.PodRunning
	e.users = runAsUsers(pod)
	e.constraints, e.constraintsErr = gpushare.ParseCardConstraints(pod.Annotations)
	e.constraints = e.constraints.ForDemand(demand)
	e.alloc, e.problem = h.checkAllocation(pod, demand, derr)
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.pods[pod.UID]
	if onlyNew && old != nil {
		return false
	}
	h.pods[pod.UID] = e
	h.byName[key] = pod.UID
	if old == nil && e.alloc != nil && e.annotations[gpushare.AnnotationAssigned] == "true" && h.legacy[pod.UID] == nil {
		// Seen for the first time already assigned: this process restarted.
		// Trust the annotation until kubelet says otherwise.
		for _, c := range e.alloc.Containers {
			ck := containerKey{pod.UID, c.Name}
			if h.grants[ck] == nil {
				h.grants[ck] = &grant{shares: c.Devices}
			}
		}
	}
	h.notify(pod.UID)
	return true
}

// checkAllocation returns the pod's allocation, or why it cannot be used.
// It reads only h.node and h.unit, so the caller need not hold h.mu.
func (h *Handoff) checkAllocation(pod *corev1.Pod, demand gpushare.Demand, derr error) (*gpushare.Allocation, string) {
	if derr != nil {
		return nil, derr.Error()
	}
	s, ok := pod.Annotations[gpushare.AnnotationAllocation]
	if !ok {
		return nil, fmt.Sprintf("it has no %s annotation; was it scheduled without the gpushare scheduler extender?", gpushare.AnnotationAllocation)
	}
	a, err := gpushare.ParseAllocation(s)
	if err != nil {
		return nil, err.Error()
	}
	if a.Node != h.node {
		return nil, fmt.Sprintf("its allocation is for node %s, not %s", a.Node, h.node)
	}
	if a.Unit != h.unit {
		return nil, fmt.Sprintf("its allocation is in %s, node %s reports %s", a.Unit, h.node, h.unit)
	}
	if err := a.CheckDemand(demand); err != nil {
		return nil, "its " + err.Error()
	}
	return a, ""
}

// DeletePod forgets a deleted pod and what its containers held.
func (h *Handoff) DeletePod(uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deletePod(uid)
}

func (h *Handoff) deletePod(uid types.UID) {
	e, ok := h.pods[uid]
	if !ok {
		return
	}
	for ck := range h.grants {
		if ck.uid == uid {
			h.drop(ck)
		}
	}
	delete(h.pods, uid)
	if h.byName[e.ref()] == uid {
		delete(h.byName, e.ref())
	}
	if _, ok := h.legacy[uid]; ok {
		delete(h.legacy, uid)
		h.pokeLegacy()
	}
}

// PodHandler feeds the informer's pod events to h. An update whose UID
// differs from the old object's is a delete and an add. A pod deleted and
// re-created under the same name while the watch was down comes back from
// the relist as one update from the old pod to the new one. The old pod's
// grants and waiting containers must go with it.
func (h *Handoff) PodHandler() toolscache.ResourceEventHandlerFuncs {
	del := func(obj any) {
		if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			h.DeletePod(pod.UID)
		}
	}
	add := func(obj any) {
		if pod, ok := obj.(*corev1.Pod); ok {
			h.UpsertPod(pod)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: add,
		UpdateFunc: func(oldObj, newObj any) {
			o, okOld := oldObj.(*corev1.Pod)
			n, okNew := newObj.(*corev1.Pod)
			if okOld && okNew && o.UID != n.UID {
				del(o)
			}
			add(newObj)
		},
		DeleteFunc: del,
	}
}
