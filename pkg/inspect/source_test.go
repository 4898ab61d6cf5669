package inspect

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// TestListPodsPages checks that every page of a paged pod list is read.
func TestListPodsPages(t *testing.T) {
	client := fake.NewClientset()
	var continues []string
	client.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		opts := a.(k8stesting.ListActionImpl).ListOptions
		continues = append(continues, opts.Continue)
		if opts.Limit != podPageSize {
			t.Errorf("limit %d, want %d", opts.Limit, podPageSize)
		}
		if opts.Continue == "" {
			return true, &corev1.PodList{ListMeta: metav1.ListMeta{Continue: "page-2"}, Items: []corev1.Pod{*util.MakePod("a").Obj()}}, nil
		}
		return true, &corev1.PodList{Items: []corev1.Pod{*util.MakePod("b").Obj()}}, nil
	})
	pods, err := ClientAPI{Client: client}.ListPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	if diff := cmp.Diff([]string{"a", "b"}, names); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"", "page-2"}, continues); diff != "" {
		t.Errorf("continue tokens (-want +got):\n%s", diff)
	}
}

func TestPendingPod(t *testing.T) {
	gated := util.MakePod("gated").GPUMem(4).Obj()
	gated.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "SchedulingGated", Message: "Scheduling is blocked due to non-empty scheduling gates"}}
	invalid := util.MakePod("invalid").GPUMem(4).Obj()
	invalid.Spec.Containers[0].Resources.Requests[gpushare.ResourceGPUMem] = resource.MustParse("2")
	tests := []struct {
		name   string
		pod    *corev1.Pod
		want   PendingPod
		wantOK bool
	}{
		{name: "no gpu-mem", pod: util.MakePod("web").Container("nginx").Obj()},
		{name: "not yet tried", pod: util.MakePod("w").InitGPUMem(10).GPUMem(4).GPUMem(4).Obj(), wantOK: true,
			want: PendingPod{Namespace: "default", Name: "w", Units: 10, Reason: "not yet scheduled"}},
		{name: "gated", pod: gated, wantOK: true,
			want: PendingPod{Namespace: "default", Name: "gated", Units: 4, Reason: "not yet scheduled: Scheduling is blocked due to non-empty scheduling gates"}},
		{name: "invalid request", pod: invalid, wantOK: true,
			want: PendingPod{Namespace: "default", Name: "invalid", Invalid: true, Reason: `invalid request, no node admits it: container "c0": aliyun.com/gpu-mem request 2 differs from limit 4; extended resources need request == limit`}},
		{name: "chooses its cards", pod: util.MakePod("a100").GPUMem(8).GPUModels("A100*").Annotation(gpushare.AnnotationGPUUUIDsExcluded, "GPU-1").Obj(), wantOK: true,
			want: PendingPod{Namespace: "default", Name: "a100", Units: 8, Cards: "of model A100* and without UUID GPU-1", Reason: "not yet scheduled"}},
		{name: "invalid card annotation", pod: util.MakePod("typo").GPUMem(8).GPUModels("A100*", "").Obj(), wantOK: true,
			want: PendingPod{Namespace: "default", Name: "typo", Units: 8, Invalid: true,
				Reason: `invalid card annotation, no node admits it: invalid gpushare annotation gpushare.io/gpu-models: entry 2 of "A100*," is empty; remove the extra comma`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := pendingPod(tc.pod)
			if ok != tc.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
