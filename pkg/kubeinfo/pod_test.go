package kubeinfo

import (
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

func TestPodInfoKeepsWhatTheExtenderReads(t *testing.T) {
	restart := corev1.ContainerRestartPolicyAlways
	pod := util.MakePod("p").GPUMemCards(8, 2).Container("plain").
		Annotation("unrelated", "x").Annotation(gpushare.AnnotationIndex, "1").Annotation(gpushare.AnnotationPolicy, "spread").
		Node("n1").Phase(corev1.PodRunning).Obj()
	pod.Spec.InitContainers = []corev1.Container{{Name: "side", RestartPolicy: &restart, Resources: pod.Spec.Containers[0].Resources}}
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	pod.ResourceVersion = "42"
	pod.Labels = map[string]string{"app": "infer"}
	prio, grace, never := int32(1000), int64(90), corev1.PreemptNever
	pod.Spec.Priority, pod.Spec.TerminationGracePeriodSeconds, pod.Spec.PreemptionPolicy = &prio, &grace, &never
	started := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	pod.Status.StartTime = &started
	want, _ := gpushare.PodDemand(pod)
	got := NewPodInfo(pod)
	wantInfo := &PodInfo{
		Name: "p", Namespace: "default", UID: "uid-p", ResourceVersion: "42", Labels: LabelSet{{"app", "infer"}},
		NodeName: "n1", Phase: corev1.PodRunning, Demand: want, LegacyIndex: 1, Policy: "spread",
		Priority: 1000, PreemptNever: true, GraceSeconds: 90, StartTime: started.Time,
	}
	if diff := cmp.Diff(wantInfo, got); diff != "" {
		t.Errorf("NewPodInfo (-want +got):\n%s", diff)
	}
	if info := NewPodInfo(util.MakePod("cpu").Container("x").Obj()); info.Demand != nil || info.LegacyIndex != -1 {
		t.Errorf("NewPodInfo of a CPU pod = %+v", info)
	}
	// An Aliyun index beyond 32 bits names no card (the cache keeps 32).
	if info := NewPodInfo(util.MakePod("big").GPUMem(4).Annotation(gpushare.AnnotationIndex, "2147483648").Obj()); info.LegacyIndex != -1 {
		t.Errorf("NewPodInfo of a pod with index 2³¹: LegacyIndex %d, want -1", info.LegacyIndex)
	}
	// The allocation shares the pod's node name and the unit constant.
	placed := util.MakePod("placed").GPUMem(4).Node("n1").Allocation(&gpushare.Allocation{Node: "n1", Unit: gpushare.UnitGiB,
		Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, Units: 4}}}}}).Obj()
	placed.Spec.NodeName = strings.Clone(placed.Spec.NodeName) // its own copy, as a decoded pod has
	info := NewPodInfo(placed)
	switch {
	case info.Allocation == nil:
		t.Errorf("NewPodInfo of a placed pod: no allocation (%s)", info.AllocationErr)
	case unsafe.StringData(info.Allocation.Node) != unsafe.StringData(info.NodeName) || unsafe.StringData(info.Allocation.Unit) != unsafe.StringData(gpushare.UnitGiB):
		t.Errorf("NewPodInfo: the allocation's node and unit are copies, not the pod's node name and the unit constant")
	}
	// A CPU pod's labels are not kept (only GPU pods are ever evicted for
	// a preemption); a deleted pod is terminating, for its deletion's grace.
	cpu := util.MakePod("cpu").Container("x").Obj()
	cpu.Labels = map[string]string{"app": "web"}
	now, short := metav1.Now(), int64(5)
	cpu.DeletionTimestamp, cpu.DeletionGracePeriodSeconds = &now, &short
	if info := NewPodInfo(cpu); info.Labels != nil || !info.Terminating || info.GraceSeconds != 5 {
		t.Errorf("NewPodInfo of a terminating CPU pod = %+v", info)
	}
}

// TestLabelSet: a LabelSet answers as the labels.Set of its map does, and
// a selector matches it as it matches the map.
func TestLabelSet(t *testing.T) {
	m := map[string]string{"team": "a", "app": "train", "tier": ""}
	l := NewLabelSet(m)
	if diff := cmp.Diff(LabelSet{{"app", "train"}, {"team", "a"}, {"tier", ""}}, l); diff != "" {
		t.Errorf("NewLabelSet (-want +got):\n%s", diff)
	}
	for _, key := range []string{"app", "team", "tier", "zone", "", "ap", "teams"} {
		v, ok := l.Lookup(key)
		wv, wok := labels.Set(m).Lookup(key)
		if v != wv || ok != wok || l.Has(key) != wok || l.Get(key) != wv {
			t.Errorf("key %q: Lookup %q %v, Has %v, Get %q; want %q %v", key, v, ok, l.Has(key), l.Get(key), wv, wok)
		}
	}
	for _, sel := range []string{"app=train", "app=infer", "team in (a,b)", "!zone", "tier", "tier=", "app,team=a", "zone"} {
		s, err := labels.Parse(sel)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := s.Matches(l), s.Matches(labels.Set(m)); got != want {
			t.Errorf("selector %q matches the LabelSet: %v, the map: %v", sel, got, want)
		}
	}
	if NewLabelSet(nil) != nil || LabelSet(nil).Has("a") {
		t.Error("an empty LabelSet is not nil, or has labels")
	}
}

// TestPodInfoObjectMetaIsOneAllocation: the informer computes a pod's
// store key through GetObjectMeta on every event; it makes the metadata
// and nothing more (no labels map).
func TestPodInfoObjectMetaIsOneAllocation(t *testing.T) {
	p := util.MakePod("p").GPUMem(4).Obj()
	p.Labels = map[string]string{"app": "train", "team": "a"}
	info := NewPodInfo(p)
	if len(info.Labels) != 2 {
		t.Fatalf("labels %v", info.Labels)
	}
	key, err := toolscache.MetaNamespaceKeyFunc(info)
	if err != nil || key != "default/p" {
		t.Fatalf("key %q, %v", key, err)
	}
	var sink metav1.Object
	if n := testing.AllocsPerRun(100, func() { sink = info.GetObjectMeta() }); n != 1 {
		t.Errorf("GetObjectMeta allocates %v times, want 1", n)
	}
	if sink.GetName() != "p" || sink.GetNamespace() != "default" {
		t.Errorf("GetObjectMeta = %+v", sink)
	}
}
