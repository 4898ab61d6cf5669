package cluster

import (
	"encoding/json"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/isolation"
	"github.com/gpushare/gpushare/test/kubelet/nodeagent"
)

// Row compares one GPU container's card as the extender chose it (the
// pod's gpushare.io/allocation annotation, after any repair by the device
// plugin) with what kubelet's device manager gave the container (recorded
// by the node agent).
type Row struct {
	Namespace, Pod, Node, Container string
	Init                            bool
	// Cards and UUIDs from the annotation, in the container's order.
	Cards []int
	UUIDs []string
	// Units per card from the annotation.
	Units int64
	// Visible is the container's NVIDIA_VISIBLE_DEVICES; EnvIndex its
	// ALIYUN_COM_GPU_MEM_IDX.
	Visible, EnvIndex string
	// Isolation is the container's GPUSHARE_ISOLATION and LimitMiB its
	// GPUSHARE_MEMORY_LIMIT_MIB.
	Isolation, LimitMiB string
	// Problem says how they disagree; empty when they agree.
	Problem string
}

// Agrees reports whether annotation and environment name the same cards.
func (r Row) Agrees() bool { return r.Problem == "" }

// Admitted reports whether pod runs on its node with its containers'
// environment recorded and, for a GPU pod, the device plugin has marked it
// assigned.
func Admitted(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.Annotations[nodeagent.AnnotationEnv] == "" {
		return false
	}
	if _, gpu := pod.Annotations[gpushare.AnnotationAllocation]; gpu {
		return pod.Annotations[gpushare.AnnotationAssigned] == "true"
	}
	return true
}

// Unschedulable returns the scheduler's message when it has found no node
// for pod.
func Unschedulable(pod *corev1.Pod) (string, bool) {
	if pod.Spec.NodeName != "" {
		return "", false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return c.Message, true
		}
	}
	return "", false
}

// Rows compares every GPU container of an admitted pod; an error when the
// pod lacks the annotations.
func Rows(pod *corev1.Pod) ([]Row, error) {
	ref := pod.Namespace + "/" + pod.Name
	a, err := gpushare.ParseAllocation(pod.Annotations[gpushare.AnnotationAllocation])
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", ref, err)
	}
	var env map[string]map[string]string
	if err := json.Unmarshal([]byte(pod.Annotations[nodeagent.AnnotationEnv]), &env); err != nil {
		return nil, fmt.Errorf("pod %s: reading %s: %w", ref, nodeagent.AnnotationEnv, err)
	}
	var devs map[string][]string
	if s := pod.Annotations[nodeagent.AnnotationDevices]; s != "" {
		if err := json.Unmarshal([]byte(s), &devs); err != nil {
			return nil, fmt.Errorf("pod %s: reading %s: %w", ref, nodeagent.AnnotationDevices, err)
		}
	}
	var rows []Row
	for _, c := range a.Containers {
		r := Row{Namespace: pod.Namespace, Pod: pod.Name, Node: pod.Spec.NodeName, Container: c.Name, Init: c.Init}
		want := map[string]int64{} // UUID -> units
		var idx []string
		for _, d := range c.Devices {
			r.Cards = append(r.Cards, d.Index)
			r.UUIDs = append(r.UUIDs, d.UUID)
			r.Units = d.Units
			idx = append(idx, strconv.Itoa(d.Index))
			want[d.UUID] = d.Units
		}
		e, ok := env[c.Name]
		r.Visible, r.EnvIndex = e[deviceplugin.EnvVisibleDevices], e[gpushare.AnnotationIndex]
		r.Isolation, r.LimitMiB = e[isolation.EnvIsolation], e[isolation.EnvMemoryLimitMiB]
		got := map[string]int64{} // UUID -> kubelet's device IDs on it
		for _, id := range devs[c.Name] {
			uuid, _, err := handoff.ParseDeviceID(id)
			if err != nil {
				return nil, fmt.Errorf("pod %s container %s: %w", ref, c.Name, err)
			}
			got[uuid]++
		}
		switch {
		case a.Node != pod.Spec.NodeName:
			r.Problem = fmt.Sprintf("the annotation is for node %s, the pod is on %s", a.Node, pod.Spec.NodeName)
		case !ok:
			r.Problem = "not admitted by kubelet's device manager"
		case r.Visible != strings.Join(r.UUIDs, ","):
			r.Problem = fmt.Sprintf("%s=%s, annotation says %s", deviceplugin.EnvVisibleDevices, r.Visible, strings.Join(r.UUIDs, ","))
		case r.EnvIndex != strings.Join(idx, ","):
			r.Problem = fmt.Sprintf("%s=%s, annotation says %s", gpushare.AnnotationIndex, r.EnvIndex, strings.Join(idx, ","))
		case !maps.Equal(want, got):
			r.Problem = fmt.Sprintf("kubelet's devices hold %v units per card, annotation says %v", got, want)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// CheckCards checks the pods bound to nodes (not finished) against the
// cards of the nodes' inventories and returns every violation: a card
// holding more units than it has by the allocation annotations, an
// allocation on an unknown card, a kubelet device ID held by two pods or
// naming a unit the card does not have.
func CheckCards(nodes []corev1.Node, pods []corev1.Pod) []string {
	type card struct {
		index int
		size  int64
	}
	byIndex := map[string]map[int]int64{}  // node -> card index -> size
	byUUID := map[string]map[string]card{} // node -> UUID -> card
	for _, n := range nodes {
		inv, err := gpushare.ParseInventory(n.Annotations[gpushare.AnnotationInventory])
		if err != nil {
			continue
		}
		byIndex[n.Name], byUUID[n.Name] = map[int]int64{}, map[string]card{}
		for _, d := range inv.Devices {
			byIndex[n.Name][d.Index] = d.Memory
			byUUID[n.Name][d.UUID] = card{d.Index, d.Memory}
		}
	}
	var bad []string
	used := map[string]map[int]int64{} // node -> card index -> units by annotation
	holder := map[string]string{}      // node/device ID -> pod
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil {
			continue
		}
		ref, node := p.Namespace+"/"+p.Name, p.Spec.NodeName
		a, err := gpushare.ParseAllocation(p.Annotations[gpushare.AnnotationAllocation])
		if err != nil {
			continue // not a GPU pod
		}
		if used[node] == nil {
			used[node] = map[int]int64{}
		}
		for idx, u := range a.PerCard() {
			used[node][idx] += u
		}
		var devs map[string][]string
		_ = json.Unmarshal([]byte(p.Annotations[nodeagent.AnnotationDevices]), &devs)
		seen := map[string]bool{} // init containers' IDs are reused by app containers
		for _, ids := range devs {
			for _, id := range ids {
				if seen[id] {
					continue
				}
				seen[id] = true
				uuid, k, err := handoff.ParseDeviceID(id)
				if err != nil {
					bad = append(bad, fmt.Sprintf("pod %s holds a malformed device ID %q", ref, id))
					continue
				}
				if c, ok := byUUID[node][uuid]; !ok || k >= c.size {
					bad = append(bad, fmt.Sprintf("pod %s holds device %s, which node %s's cards do not have", ref, id, node))
				}
				key := node + "/" + id
				if o, dup := holder[key]; dup {
					bad = append(bad, fmt.Sprintf("device %s of node %s held by pods %s and %s", id, node, o, ref))
				}
				holder[key] = ref
			}
		}
	}
	for node, cards := range used {
		idxs := make([]int, 0, len(cards))
		for idx := range cards {
			idxs = append(idxs, idx)
		}
		sort.Ints(idxs)
		for _, idx := range idxs {
			size, ok := byIndex[node][idx]
			if !ok || cards[idx] > size {
				bad = append(bad, fmt.Sprintf("node %s card %d holds %d GiB by the annotations, has %d", node, idx, cards[idx], size))
			}
		}
	}
	return bad
}
