package trace

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// withCPU sets the first container's CPU and memory requests.
func withCPU(p *corev1.Pod, cpu, mem string) *corev1.Pod {
	if len(p.Spec.Containers) == 0 {
		p.Spec.Containers = []corev1.Container{{Name: "main"}}
	}
	c := &p.Spec.Containers[0]
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(mem)
	return p
}

func TestReadKubernetes(t *testing.T) {
	initPod := util.MakePod("prep").InitGPUMem(8).GPUMem(4).Obj()
	initPod.Spec.InitContainers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse("6")
	withCPU(initPod, "2", "1Gi")
	zoned := util.MakeNode("cap").Capacity(64, 2).Obj()
	zoned.Labels = map[string]string{corev1.LabelTopologyZone: "z1"}
	input := util.KubeList(t,
		util.MakeNode("inv").Cards("Tesla T4", 16, 16).Unhealthy(1).Obj(),
		zoned,
		util.MakeNode("cpu-only").Obj(),
		withCPU(util.MakePod("train").GPUMem(12).NodeSelector(gpushare.NVIDIALabelProduct, "Tesla-T4").Obj(), "4", "8Gi"),
		withCPU(util.MakePod("web").Container("web").Obj(), "500m", "256Mi"),
		util.MakePod("done").GPUMem(4).Phase(corev1.PodSucceeded).Obj(),
		util.MakePod("duo").GPUMemCards(32, 2).Obj(),
		initPod,
	)
	nodes, pods, err := ReadKubernetes(strings.NewReader(input), "cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	wantNodes := []Node{
		{Name: "inv", MilliCPU: 8000, MemoryMiB: 32768, Model: "Tesla T4", Unit: "GiB", Cards: []allocator.Card{
			{Index: 0, Total: 16, Healthy: true, Info: &allocator.CardInfo{UUID: "GPU-inv-0", Model: "Tesla T4", Isolation: gpushare.IsolationNone}},
			{Index: 1, Total: 16, Healthy: false, Info: &allocator.CardInfo{UUID: "GPU-inv-1", Model: "Tesla T4", Isolation: gpushare.IsolationNone}}}},
		{Name: "cap", MilliCPU: 8000, MemoryMiB: 32768, Unit: "GiB", Cards: []allocator.Card{
			{Index: 0, Total: 32, Healthy: true, Info: &allocator.CardInfo{Isolation: gpushare.IsolationNone}}, {Index: 1, Total: 32, Healthy: true, Info: &allocator.CardInfo{Isolation: gpushare.IsolationNone}}}, Zone: ":\x00:z1",
			Labels: map[string]string{corev1.LabelTopologyZone: "z1"}},
		{Name: "cpu-only", MilliCPU: 8000, MemoryMiB: 32768, Unit: "GiB"},
	}
	if diff := cmp.Diff(wantNodes, nodes); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
	wantPods := []Pod{
		{Name: "default/train", MilliCPU: 4000, MemoryMiB: 8192, Demand: gpushare.Demand{{Name: "c0", Units: 12, Cards: 1}}, Kind: KindShare,
			NodeSelector: map[string]string{gpushare.NVIDIALabelProduct: "Tesla-T4"}},
		{Name: "default/web", MilliCPU: 500, MemoryMiB: 256, Kind: KindCPU},
		// No CPU or memory request: kube-scheduler's scores count
		// 100 millicores and 200 MiB.
		{Name: "default/duo", NonZeroMilliCPU: 100, NonZeroMemoryMiB: 200, Demand: gpushare.Demand{{Name: "c0", Units: 16, Cards: 2}}, Kind: KindMulti},
		// The init container's 6 cores outweigh the app's 2 (its
		// missing memory request counts 200 MiB in scores, below the
		// app's 1 GiB).
		{Name: "default/prep", MilliCPU: 6000, MemoryMiB: 1024, Demand: gpushare.Demand{{Name: "i0", Init: true, Units: 8, Cards: 1}, {Name: "c0", Units: 4, Cards: 1}}, Kind: KindShare},
	}
	if diff := cmp.Diff(wantPods, pods); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
}

// TestTraceOf: the trace of objects is what ReadKubernetes reads of them
// from a file, and the objects are left as they were.
func TestTraceOf(t *testing.T) {
	nodes := []*corev1.Node{util.MakeNode("inv").Cards("Tesla T4", 16, 16).Obj(), util.MakeNode("cpu-only").Obj()}
	pods := []*corev1.Pod{withCPU(util.MakePod("train").GPUMem(12).Obj(), "4", "8Gi"), withCPU(util.MakePod("web").Container("web").Obj(), "1", "1Gi")}
	before := []any{nodes[0].DeepCopy(), nodes[1].DeepCopy(), pods[0].DeepCopy(), pods[1].DeepCopy()}
	tr, err := TraceOf(nodes, pods)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(before, []any{nodes[0], nodes[1], pods[0], pods[1]}); diff != "" {
		t.Errorf("TraceOf changed its objects:\n%s", diff)
	}
	wantNodes, wantPods, err := ReadKubernetes(strings.NewReader(util.KubeList(t, nodes[0], nodes[1], pods[0], pods[1])), "cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(&Trace{Nodes: wantNodes, Pods: wantPods}, tr); diff != "" {
		t.Errorf("TraceOf (-ReadKubernetes +TraceOf):\n%s", diff)
	}
	if len(tr.Nodes) != 2 || len(tr.Pods) != 2 || tr.Pods[0].Name != "default/train" {
		t.Errorf("trace %+v: want 2 nodes and the pods in order", tr)
	}
}

func TestReadKubernetesDocuments(t *testing.T) {
	input := "# a node, then a pod\napiVersion: v1\nkind: Node\nmetadata:\n  name: n1\nstatus:\n  allocatable:\n    cpu: \"4\"\n    memory: 8Gi\n    aliyun.com/gpu-mem: \"16\"\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ignored\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ns\nspec:\n  containers:\n  - name: c\n    resources:\n      limits:\n        aliyun.com/gpu-mem: \"3\"\n"
	nodes, pods, err := ReadKubernetes(strings.NewReader(input), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || nodes[0].MilliCPU != 4000 || len(nodes[0].Cards) != 1 || nodes[0].Cards[0].Total != 16 {
		t.Errorf("nodes = %+v", nodes)
	}
	if len(pods) != 1 || pods[0].Name != "ns/p" || pods[0].Units() != 3 {
		t.Errorf("pods = %+v", pods)
	}
}

func TestReadKubernetesErrors(t *testing.T) {
	tests := []struct {
		name, input, want string
	}{
		{"syntax error in the second document", "kind: Node\nmetadata:\n  name: a\n---\nkind: Pod\nmetadata:\n  name: [unclosed\n",
			"x.yaml:7:1: did not find expected ',' or ']'"},
		{"gpu-mem request differs from limit", "kind: Pod\nmetadata:\n  name: p\n  namespace: ns\nspec:\n  containers:\n  - name: c\n    resources:\n      limits:\n        aliyun.com/gpu-mem: \"4\"\n      requests:\n        aliyun.com/gpu-mem: \"2\"\n",
			`x.yaml:1:1: pod ns/p: container "c": aliyun.com/gpu-mem request 2 differs from limit 4; extended resources need request == limit`},
		{"duplicate node in a list", "kind: List\nitems:\n- kind: Node\n  metadata:\n    name: a\n- kind: Node\n  metadata:\n    name: a\n",
			"x.yaml:1:1: item 1: node a appears twice (first on line 1)"},
		{"not an object", "- just\n- a list\n", "x.yaml:1:1: not a Kubernetes object: want a mapping with apiVersion and kind"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ReadKubernetes(strings.NewReader(tc.input), "x.yaml")
			got := "<nil>"
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestZoneKey(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"none", nil, ""},
		{"zone only", map[string]string{"topology.kubernetes.io/zone": "z"}, ":\x00:z"},
		{"region and zone", map[string]string{"topology.kubernetes.io/region": "r", "topology.kubernetes.io/zone": "z"}, "r:\x00:z"},
		{"the deprecated labels first", map[string]string{"failure-domain.beta.kubernetes.io/zone": "old", "topology.kubernetes.io/zone": "z"}, ":\x00:old"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ZoneKey(tc.labels)); diff != "" {
				t.Errorf("ZoneKey (-want +got):\n%s", diff)
			}
		})
	}
}
