package soak

import (
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/test/kubelet/cluster"
)

// CheckEnv compares every GPU container of every admitted pod with its
// pod's annotation (cluster.Rows) and returns the disagreements.
func CheckEnv(pods []corev1.Pod) []string {
	var bad []string
	for i := range pods {
		p := &pods[i]
		if _, gpu := p.Annotations[gpushare.AnnotationAllocation]; !gpu || p.DeletionTimestamp != nil || !cluster.Admitted(p) {
			continue
		}
		rows, err := cluster.Rows(p)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		for _, r := range rows {
			if !r.Agrees() {
				bad = append(bad, fmt.Sprintf("pod %s/%s container %s on %s: %s", r.Namespace, r.Pod, r.Container, r.Node, r.Problem))
			}
		}
	}
	return bad
}

// CheckKubelet compares kubelet's PodResources of node (what its device
// manager holds now) with the API's pods: no gpu-mem device ID held by two
// pods or beyond its card's size, and every listed container of a pod
// that runs admitted on node holds, per card, the units its annotation
// says. Pods the API no longer shows admitted are compared for duplicates
// only (kubelet may hold a deleted pod until it removes it).
func CheckKubelet(node *corev1.Node, pods []corev1.Pod, listed []*podresourcesv1.PodResources) []string {
	sizes := map[string]int64{} // UUID -> units
	if inv, err := gpushare.ParseInventory(node.Annotations[gpushare.AnnotationInventory]); err == nil {
		for _, d := range inv.Devices {
			sizes[d.UUID] = d.Memory
		}
	}
	admitted := map[string]*corev1.Pod{} // namespace/name -> pod
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == node.Name && p.DeletionTimestamp == nil && cluster.Admitted(p) {
			admitted[p.Namespace+"/"+p.Name] = p
		}
	}
	var bad []string
	holder := map[string]string{} // device ID -> pod
	for _, pr := range listed {
		ref := pr.GetNamespace() + "/" + pr.GetName()
		mine := map[string]bool{}            // an init container's IDs go on to an app container
		got := map[string]map[string]int64{} // container -> UUID -> IDs
		for _, c := range pr.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() != string(gpushare.ResourceGPUMem) {
					continue
				}
				for _, id := range d.GetDeviceIds() {
					uuid, k, err := handoff.ParseDeviceID(id)
					if err != nil {
						bad = append(bad, fmt.Sprintf("node %s: kubelet gives pod %s a malformed device ID %q", node.Name, ref, id))
						continue
					}
					if size, known := sizes[uuid]; len(sizes) > 0 && (!known || k >= size) {
						bad = append(bad, fmt.Sprintf("node %s: kubelet gives pod %s device %s, which no card of the node's inventory has", node.Name, ref, id))
					}
					if got[c.GetName()] == nil {
						got[c.GetName()] = map[string]int64{}
					}
					got[c.GetName()][uuid]++
					if mine[id] {
						continue
					}
					mine[id] = true
					if other, dup := holder[id]; dup {
						bad = append(bad, fmt.Sprintf("node %s: kubelet gives device %s to pods %s and %s", node.Name, id, other, ref))
					}
					holder[id] = ref
				}
			}
		}
		p, ok := admitted[ref]
		if !ok {
			continue
		}
		a, err := gpushare.ParseAllocation(p.Annotations[gpushare.AnnotationAllocation])
		if err != nil {
			continue // not a GPU pod
		}
		for _, c := range a.Containers {
			g, listedC := got[c.Name]
			if !listedC && c.Init {
				continue // kubelet lists only app and sidecar containers
			}
			want := map[string]int64{}
			for _, d := range c.Devices {
				want[d.UUID] += d.Units
			}
			if !maps.Equal(want, g) {
				bad = append(bad, fmt.Sprintf("node %s: pod %s container %s holds %s by kubelet's device IDs, %s by its annotation",
					node.Name, ref, c.Name, unitsString(g), unitsString(want)))
			}
		}
	}
	return bad
}

// unitsString prints UUID -> units sorted, e.g. "{GPU-a:2 GPU-b:4}".
func unitsString(m map[string]int64) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, m[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// cardKey names one card of one node.
type cardKey struct {
	node  string
	index int
}

// cardState is what the comparison of InspectDiff looks at.
type cardState struct {
	healthy bool
	// pods: "namespace/name=units", sorted.
	pods []string
}

// InspectDiff compares the extender's /inspect (views) with a
// recomputation from the API: each card's health from its node's
// inventory, and the pods holding it from the allocation annotations of
// the bound, unfinished pods (terminating ones still hold their cards).
// It returns one line per card that differs, naming both sides.
func InspectDiff(views []inspectapi.Node, nodes []corev1.Node, pods []corev1.Pod) []string {
	ext := map[cardKey]cardState{}
	for _, n := range views {
		for _, c := range n.Cards {
			s := cardState{healthy: c.Healthy}
			for _, p := range c.Pods {
				s.pods = append(s.pods, fmt.Sprintf("%s/%s=%d", p.Namespace, p.Name, p.Units))
			}
			sort.Strings(s.pods)
			ext[cardKey{n.Name, c.Index}] = s
		}
	}
	api := map[cardKey]cardState{}
	for _, n := range nodes {
		inv, err := gpushare.ParseInventory(n.Annotations[gpushare.AnnotationInventory])
		if err != nil {
			continue
		}
		for _, d := range inv.Devices {
			api[cardKey{n.Name, d.Index}] = cardState{healthy: d.Healthy}
		}
	}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		a, err := gpushare.ParseAllocation(p.Annotations[gpushare.AnnotationAllocation])
		if err != nil || a.Node != p.Spec.NodeName {
			continue
		}
		for idx, u := range a.PerCard() {
			k := cardKey{p.Spec.NodeName, idx}
			s := api[k]
			s.pods = append(s.pods, fmt.Sprintf("%s/%s=%d", p.Namespace, p.Name, u))
			api[k] = s
		}
	}
	keys := map[cardKey]bool{}
	for k := range ext {
		keys[k] = true
	}
	for k := range api {
		keys[k] = true
	}
	var bad []string
	for k := range keys {
		e, inExt := ext[k]
		a, inAPI := api[k]
		sort.Strings(a.pods)
		switch {
		case !inExt:
			bad = append(bad, fmt.Sprintf("node %s card %d: the extender does not show it; the API: %s", k.node, k.index, a))
		case !inAPI:
			bad = append(bad, fmt.Sprintf("node %s card %d: the API has no such card; the extender: %s", k.node, k.index, e))
		case e.String() != a.String():
			bad = append(bad, fmt.Sprintf("node %s card %d: the extender: %s; the API: %s", k.node, k.index, e, a))
		}
	}
	sort.Strings(bad)
	return bad
}

func (s cardState) String() string {
	h := "healthy"
	if !s.healthy {
		h = "unhealthy"
	}
	return fmt.Sprintf("%s [%s]", h, strings.Join(s.pods, " "))
}

// Lasting tracks differences seen by successive checks and reports those
// that have lasted at least a bound: a difference between two views read
// at slightly different moments is normal for a while (an informer's
// delay, a bind in flight), one that stays is a stale view.
type Lasting struct {
	bound time.Duration
	// since: difference -> when the checks started seeing it without a
	// break.
	since map[string]time.Time
}

// NewLasting returns a tracker with bound.
func NewLasting(bound time.Duration) *Lasting {
	return &Lasting{bound: bound, since: map[string]time.Time{}}
}

// Observe records the differences one check saw at now and returns those
// seen without a break for at least the bound, with how long.
func (l *Lasting) Observe(now time.Time, diffs []string) []string {
	seen := map[string]time.Time{}
	var out []string
	for _, d := range diffs {
		first, ok := l.since[d]
		if !ok {
			first = now
		}
		seen[d] = first
		if age := now.Sub(first); age >= l.bound {
			out = append(out, fmt.Sprintf("%s (for %.0fs and more)", d, l.bound.Seconds()))
		}
	}
	l.since = seen
	return out
}

// CheckRecovered returns what is not back to full health on nodes: a card
// unhealthy in the inventory, or kubelet's allocatable gpu-mem below
// total[node] (the node's GiB; nodes not in total are skipped).
func CheckRecovered(nodes []corev1.Node, total map[string]int64) []string {
	var bad []string
	for i := range nodes {
		n := &nodes[i]
		want, ok := total[n.Name]
		if !ok {
			continue
		}
		inv, err := gpushare.ParseInventory(n.Annotations[gpushare.AnnotationInventory])
		if err != nil {
			bad = append(bad, fmt.Sprintf("node %s has no valid inventory: %v", n.Name, err))
			continue
		}
		for _, d := range inv.Devices {
			if !d.Healthy {
				bad = append(bad, fmt.Sprintf("node %s card %d is still unhealthy", n.Name, d.Index))
			}
		}
		q := n.Status.Allocatable[gpushare.ResourceGPUMem]
		if q.Value() != want {
			bad = append(bad, fmt.Sprintf("node %s: kubelet's allocatable %s is %d, want %d", n.Name, gpushare.ResourceGPUMem, q.Value(), want))
		}
	}
	return bad
}
