package soak

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/test/kubelet/nodeagent"
	"github.com/gpushare/gpushare/test/util"
)

// node1 has two 16 GiB cards, GPU-n1-0 and GPU-n1-1.
func node1() *corev1.Node { return util.MakeNode("n1").Cards("Tesla T4", 16, 16).Obj() }

// runningPod is admitted on n1 with units on card (container c0, its
// environment and kubelet's IDs agreeing with the annotation).
func runningPod(name string, card int, units int64) *corev1.Pod {
	uuid := fmt.Sprintf("GPU-n1-%d", card)
	a := &gpushare.Allocation{Node: "n1", Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: card, UUID: uuid, Units: units}}},
	}}
	env, _ := json.Marshal(map[string]map[string]string{"c0": {deviceplugin.EnvVisibleDevices: uuid, gpushare.AnnotationIndex: fmt.Sprint(card)}})
	return util.MakePod(name).Namespace("soak").GPUMem(units).Node("n1").Phase(corev1.PodRunning).Allocation(a).
		Annotation(gpushare.AnnotationAssigned, "true").Annotation(nodeagent.AnnotationEnv, string(env)).Obj()
}

// listed is kubelet's PodResources entry of a pod whose container c0
// holds units k=from..from+n-1 of card uuid.
func listed(pod, uuid string, from, n int) *podresourcesv1.PodResources {
	var ids []string
	for k := from; k < from+n; k++ {
		ids = append(ids, handoff.DeviceID(uuid, int64(k)))
	}
	return &podresourcesv1.PodResources{Name: pod, Namespace: "soak", Containers: []*podresourcesv1.ContainerResources{{
		Name: "c0", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: string(gpushare.ResourceGPUMem), DeviceIds: ids}},
	}}}
}

func TestCheckKubelet(t *testing.T) {
	tests := []struct {
		name   string
		pods   []corev1.Pod
		listed []*podresourcesv1.PodResources
		want   []string // substrings, one per problem
	}{
		{
			name:   "agree",
			pods:   []corev1.Pod{*runningPod("a", 0, 4), *runningPod("b", 0, 2)},
			listed: []*podresourcesv1.PodResources{listed("a", "GPU-n1-0", 0, 4), listed("b", "GPU-n1-0", 4, 2)},
		},
		{
			name:   "one device given to two pods",
			pods:   []corev1.Pod{*runningPod("a", 0, 4), *runningPod("b", 0, 2)},
			listed: []*podresourcesv1.PodResources{listed("a", "GPU-n1-0", 0, 4), listed("b", "GPU-n1-0", 3, 2)},
			want:   []string{"kubelet gives device GPU-n1-0::3 to pods soak/a and soak/b"},
		},
		{
			name:   "kubelet holds other units than the annotation",
			pods:   []corev1.Pod{*runningPod("a", 0, 4)},
			listed: []*podresourcesv1.PodResources{listed("a", "GPU-n1-1", 0, 4)},
			want:   []string{"container c0 holds {GPU-n1-1:4} by kubelet's device IDs, {GPU-n1-0:4} by its annotation"},
		},
		{
			name:   "a device beyond the card",
			pods:   []corev1.Pod{*runningPod("a", 1, 2)},
			listed: []*podresourcesv1.PodResources{listed("a", "GPU-n1-1", 15, 2)},
			want:   []string{"device GPU-n1-1::16, which no card"},
		},
		{
			name: "a deleted pod kubelet still holds is checked for duplicates only",
			pods: []corev1.Pod{*runningPod("b", 0, 2)},
			listed: []*podresourcesv1.PodResources{
				listed("gone", "GPU-n1-1", 0, 8), listed("b", "GPU-n1-0", 0, 2),
			},
		},
		{
			name: "a pod not yet admitted is not compared",
			pods: func() []corev1.Pod {
				p := runningPod("a", 0, 4)
				delete(p.Annotations, nodeagent.AnnotationEnv)
				return []corev1.Pod{*p}
			}(),
			listed: []*podresourcesv1.PodResources{listed("a", "GPU-n1-0", 0, 1)},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckKubelet(node1(), tc.pods, tc.listed)
			if len(got) != len(tc.want) {
				t.Fatalf("CheckKubelet = %q, want %d problems like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestInspectDiff(t *testing.T) {
	view := func(healthy0 bool, pods0 ...inspectapi.Pod) []inspectapi.Node {
		if pods0 == nil {
			pods0 = []inspectapi.Pod{}
		}
		return []inspectapi.Node{{Name: "n1", Cards: []inspectapi.Card{
			{Index: 0, Total: 16, Healthy: healthy0, Pods: pods0},
			{Index: 1, Total: 16, Healthy: true, Pods: []inspectapi.Pod{}},
		}}}
	}
	share := func(name string, units int64) inspectapi.Pod {
		return inspectapi.Pod{Namespace: "soak", Name: name, Units: units, State: "bound"}
	}
	failed := runningPod("f", 0, 8)
	failed.Status.Phase = corev1.PodFailed
	terminating := runningPod("t", 0, 2)
	terminating.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	tests := []struct {
		name  string
		views []inspectapi.Node
		node  *corev1.Node
		pods  []corev1.Pod
		want  []string
	}{
		{name: "agree", views: view(true, share("a", 4)), node: node1(), pods: []corev1.Pod{*runningPod("a", 0, 4)}},
		{
			name: "finished pods hold nothing, terminating ones still do", views: view(true, share("t", 2)), node: node1(),
			pods: []corev1.Pod{*failed, *terminating},
		},
		{
			name: "the extender still holds a deleted pod", views: view(true, share("a", 4), share("gone", 2)), node: node1(),
			pods: []corev1.Pod{*runningPod("a", 0, 4)},
			want: []string{"node n1 card 0: the extender: healthy [soak/a=4 soak/gone=2]; the API: healthy [soak/a=4]"},
		},
		{
			name: "health differs", views: view(true), node: util.MakeNode("n1").Cards("Tesla T4", 16, 16).Unhealthy(0).Obj(),
			want: []string{"node n1 card 0: the extender: healthy []; the API: unhealthy []"},
		},
		{
			name: "a card the extender does not show", views: view(true), node: util.MakeNode("n1").Cards("Tesla T4", 16, 16, 16).Obj(),
			want: []string{"node n1 card 2: the extender does not show it; the API: healthy []"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := InspectDiff(tc.views, []corev1.Node{*tc.node}, tc.pods)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("InspectDiff (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLasting(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewLasting(10 * time.Second)
	steps := []struct {
		at    time.Duration
		diffs []string
		want  []string
	}{
		{at: 0, diffs: []string{"x", "y"}},
		{at: 5 * time.Second, diffs: []string{"x", "y"}},
		{at: 8 * time.Second, diffs: []string{"x"}}, // y goes away
		{at: 9 * time.Second, diffs: []string{"x", "y"}},
		{at: 10 * time.Second, diffs: []string{"x", "y"}, want: []string{"x (for 10s and more)"}},
		{at: 19 * time.Second, diffs: []string{"y"}, want: []string{"y (for 10s and more)"}},
	}
	for _, s := range steps {
		got := l.Observe(t0.Add(s.at), s.diffs)
		if diff := cmp.Diff(s.want, got); diff != "" {
			t.Errorf("at %s (-want +got):\n%s", s.at, diff)
		}
	}
}

func TestSummaryLine(t *testing.T) {
	s := Summary{Seed: 42, Faults: map[Kind]int{KindExtenderKill: 3, KindCardUnhealthy: 2, KindPluginKill: 0}, Pods: 120, Violations: 1, Overlapped: 4}
	if got, want := s.Line(), "soak: seed=42 faults=5 kinds=2 pods=120 violations=1 overlapped=4"; got != want {
		t.Errorf("Line() = %q, want %q", got, want)
	}
}

func TestCheckRecovered(t *testing.T) {
	healthy := util.MakeNode("n1").Cards("Tesla T4", 16, 16).Obj()
	tests := []struct {
		name string
		node *corev1.Node
		want []string
	}{
		{name: "recovered", node: healthy},
		{name: "a card still unhealthy", node: util.MakeNode("n1").Cards("Tesla T4", 16, 16).Unhealthy(1).Obj(), want: []string{"node n1 card 1 is still unhealthy"}},
		{name: "allocatable short", node: util.MakeNode("n1").Cards("Tesla T4", 16, 16).Capacity(16, 2).Obj(),
			want: []string{"node n1: kubelet's allocatable aliyun.com/gpu-mem is 16, want 32"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := CheckRecovered([]corev1.Node{*tc.node}, map[string]int64{"n1": 32})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("CheckRecovered (-want +got):\n%s", diff)
			}
		})
	}
}
