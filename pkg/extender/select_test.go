package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// TestWireGoldenCardChoice: filter, prioritize and bind of pods that choose
// cards, on the fixture's nodes plus a100 (two A100 cards, card 0 in mps
// isolation, card 1 cordoned by the operator).
func TestWireGoldenCardChoice(t *testing.T) {
	a100 := func() runtime.Object {
		return util.MakeNode("a100").Cards("A100-SXM4-80GB", 80, 80).Isolation(0, gpushare.IsolationMPS).Cordon("GPU-a100-1").Obj()
	}
	models := func(name, value string) *corev1.Pod {
		return util.MakePod(name).GPUMem(12).Annotation(gpushare.AnnotationGPUModels, value).Obj()
	}
	tests := []struct {
		name, path string
		pod        *corev1.Pod // also created in the API, for bind
		body       func(t *testing.T, pod *corev1.Pod) string
		wantStatus int
	}{
		{
			name: "filter-gpu-models", path: "/gpushare-scheduler/filter", pod: models("a100-only", "A100*"),
			body: func(t *testing.T, p *corev1.Pod) string {
				return extenderArgs(t, p, "mixed", "sick", "nogpu", "a100")
			},
			wantStatus: 200,
		},
		{
			name: "filter-gpu-uuids-excluded", path: "/gpushare-scheduler/filter",
			pod: util.MakePod("not-a100-0").GPUMem(12).Annotation(gpushare.AnnotationGPUUUIDsExcluded, "GPU-a100-0,GPU-mixed-1").Obj(),
			body: func(t *testing.T, p *corev1.Pod) string {
				return extenderArgs(t, p, "mixed", "a100")
			},
			wantStatus: 200,
		},
		{
			name: "filter-isolation-enforced", path: "/gpushare-scheduler/filter", pod: util.MakePod("fenced").GPUMem(12).Enforced().Obj(),
			body: func(t *testing.T, p *corev1.Pod) string {
				return extenderArgs(t, p, "mixed", "sick", "a100")
			},
			wantStatus: 200,
		},
		{
			name: "bind-isolation-enforced-elsewhere", path: "/gpushare-scheduler/bind", pod: util.MakePod("fenced").GPUMem(12).Enforced().Obj(),
			body: func(*testing.T, *corev1.Pod) string {
				return `{"PodName":"fenced","PodNamespace":"default","PodUID":"uid-fenced","Node":"mixed"}`
			},
			wantStatus: 200,
		},
		{
			name: "filter-gpu-models-invalid", path: "/gpushare-scheduler/filter", pod: models("typo", "A100*,"),
			body: func(t *testing.T, p *corev1.Pod) string {
				return extenderArgs(t, p, "mixed", "a100")
			},
			wantStatus: 200,
		},
		{
			name: "prioritize-gpu-models-invalid", path: "/gpushare-scheduler/prioritize", pod: models("typo", ""),
			body: func(t *testing.T, p *corev1.Pod) string {
				return extenderArgs(t, p, "mixed", "a100")
			},
			wantStatus: 400,
		},
		{
			name: "bind-gpu-models-elsewhere", path: "/gpushare-scheduler/bind", pod: models("a100-only", "A100*"),
			body: func(*testing.T, *corev1.Pod) string {
				return `{"PodName":"a100-only","PodNamespace":"default","PodUID":"uid-a100-only","Node":"mixed"}`
			},
			wantStatus: 200,
		},
		{
			name: "bind-gpu-models-invalid", path: "/gpushare-scheduler/bind", pod: models("typo", "A100*,,H100*"),
			body: func(*testing.T, *corev1.Pod) string {
				return `{"PodName":"typo","PodNamespace":"default","PodUID":"uid-typo","Node":"a100"}`
			},
			wantStatus: 200,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, a100(), tc.pod.DeepCopy())
			body := tc.body(t, tc.pod)
			if *update {
				var pretty bytes.Buffer
				if json.Indent(&pretty, []byte(body), "", "  ") == nil {
					_ = os.WriteFile(filepath.Join("testdata", tc.name+".request.json"), append(pretty.Bytes(), '\n'), 0o644)
				}
			}
			status, got := f.do(t, "POST", tc.path, body)
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d; body %s", status, tc.wantStatus, got)
			}
			golden(t, tc.name+".response.json", got)
		})
	}
}

// TestBindChoosesAnEligibleCard: the allocation the bind writes names only
// a card the pod's annotations allow and the operator has not cordoned.
func TestBindChoosesAnEligibleCard(t *testing.T) {
	pod := util.MakePod("a100-only").GPUMem(12).GPUModels("A100*").Obj()
	f := newFixture(t, util.MakeNode("a100").Cards("A100-SXM4-80GB", 80, 80).Cordon("GPU-a100-0").Obj(), pod)
	if _, got := f.do(t, "POST", "/gpushare-scheduler/bind", `{"PodName":"a100-only","PodNamespace":"default","PodUID":"uid-a100-only","Node":"a100"}`); got != "{\n  \"Error\": \"\"\n}\n" {
		t.Fatalf("bind = %s", got)
	}
	got, err := f.client.CoreV1().Pods("default").Get(context.Background(), "a100-only", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"node":"a100","unit":"GiB","containers":[{"name":"c0","devices":[{"index":1,"uuid":"GPU-a100-1","units":12}]}]}`
	if diff := cmp.Diff(want, got.Annotations[gpushare.AnnotationAllocation]); diff != "" {
		t.Errorf("allocation (-want +got):\n%s", diff)
	}
}
