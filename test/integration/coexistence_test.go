package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// resourceNVIDIAGPU is what NVIDIA's device plugin (alone or in the GPU
// Operator) advertises: whole cards.
const resourceNVIDIAGPU corev1.ResourceName = "nvidia.com/gpu"

// TestCoexistsWithNVIDIAPlugin runs docs/coexistence.md's layout through
// the real kube-scheduler with the shipped configuration and the extender:
// node gpushare-a is gpushare's (aliyun.com/gpu-mem and the inventory, as
// our device plugin publishes them), node nvidia-b NVIDIA's device
// plugin's (nvidia.com/gpu: 2). Pods asking nvidia.com/gpu land on
// nvidia-b without the extender's filter being asked about them (its
// managedResources name only gpushare's resources), get no gpushare
// annotation, and wait with kube-scheduler's "Insufficient nvidia.com/gpu"
// once nvidia-b is full: never on gpushare-a, whose cards kubelet never
// hears of under that name. Pods asking gpu-mem land on gpushare-a only.
func TestCoexistsWithNVIDIAPlugin(t *testing.T) {
	c := startCluster(t)
	ctx := context.Background()
	c.addNode(t, util.MakeNode("gpushare-a").Cards("Tesla T4", 16, 16).Obj())
	nv := util.MakeNode("nvidia-b").Obj()
	for _, rl := range []corev1.ResourceList{nv.Status.Capacity, nv.Status.Allocatable} {
		rl[resourceNVIDIAGPU] = resource.MustParse("2")
	}
	c.addNode(t, nv)

	filters := func() float64 {
		var n float64
		for _, m := range scrapeMetrics(t, "http://"+c.listen+"/metrics")["gpushare_extender_request_duration_seconds"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "verb" && l.GetValue() == "filter" {
					n += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
		return n
	}
	before := filters()
	for _, name := range []string{"cuda-0", "cuda-1"} {
		c.createPod(t, wholeCardPod(name))
	}
	c.waitBound(t, []string{"cuda-0", "cuda-1"}, 60*time.Second)
	if got := filters(); got != before {
		t.Errorf("the extender's filter was asked %v times about pods asking only nvidia.com/gpu; want never", got-before)
	}

	c.createPod(t, wholeCardPod("cuda-2")) // nvidia-b is full
	c.createPod(t, util.MakePod("shared-0").GPUMem(8).Obj())
	c.createPod(t, util.MakePod("shared-1").GPUMem(8).Obj())
	c.waitBound(t, []string{"shared-0", "shared-1"}, 60*time.Second)

	var msg string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := c.admin.CoreV1().Pods("default").Get(ctx, "cuda-2", metav1.GetOptions{})
		if err != nil || !util.SchedulingFailed(p) {
			return false, nil
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				msg = cond.Message
			}
		}
		return strings.Contains(msg, "Insufficient nvidia.com/gpu"), nil
	})
	if err != nil {
		t.Errorf("cuda-2 did not wait with Insufficient nvidia.com/gpu; last message %q (logs: %s)", msg, c.cp.LogsDir())
	}

	pods, err := c.admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		wantNode := map[bool]string{true: "nvidia-b", false: "gpushare-a"}[strings.HasPrefix(p.Name, "cuda-")]
		if p.Name == "cuda-2" {
			wantNode = ""
		}
		if p.Spec.NodeName != wantNode {
			t.Errorf("pod %s on node %q, want %q", p.Name, p.Spec.NodeName, wantNode)
		}
		_, annotated := p.Annotations[gpushare.AnnotationAllocation]
		if strings.HasPrefix(p.Name, "cuda-") && annotated {
			t.Errorf("pod %s asks only nvidia.com/gpu but carries %s", p.Name, gpushare.AnnotationAllocation)
		}
	}
}

// wholeCardPod asks one whole card of NVIDIA's device plugin.
func wholeCardPod(name string) *corev1.Pod {
	p := util.MakePod(name).Container("cuda").Obj()
	rl := corev1.ResourceList{resourceNVIDIAGPU: resource.MustParse("1")}
	p.Spec.Containers[0].Resources = corev1.ResourceRequirements{Limits: rl, Requests: rl.DeepCopy()}
	return p
}
