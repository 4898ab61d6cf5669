package cluster

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/kubelet/nodeagent"
	"github.com/gpushare/gpushare/test/util"
)

// admitted returns a pod on node n1 whose single container c0 is annotated
// with units on card (UUID "GPU-n1-<card>") and got env and kubelet device
// IDs as given.
func admitted(name string, card int, units int64, env map[string]string, ids []string) *corev1.Pod {
	a := &gpushare.Allocation{Node: "n1", Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: card, UUID: fmt.Sprintf("GPU-n1-%d", card), Units: units}}},
	}}
	e, _ := json.Marshal(map[string]map[string]string{"c0": env})
	d, _ := json.Marshal(map[string][]string{"c0": ids})
	return util.MakePod(name).GPUMem(units).Node("n1").Phase(corev1.PodRunning).Allocation(a).
		Annotation(nodeagent.AnnotationEnv, string(e)).Annotation(nodeagent.AnnotationDevices, string(d)).Obj()
}

func ids(uuid string, from, n int) []string {
	var out []string
	for k := from; k < from+n; k++ {
		out = append(out, handoff.DeviceID(uuid, int64(k)))
	}
	return out
}

func goodEnv(card int) map[string]string {
	return map[string]string{deviceplugin.EnvVisibleDevices: fmt.Sprintf("GPU-n1-%d", card), gpushare.AnnotationIndex: fmt.Sprint(card)}
}

func TestRows(t *testing.T) {
	tests := []struct {
		name        string
		pod         *corev1.Pod
		wantProblem string // "" when they agree
	}{
		{name: "agree", pod: admitted("p", 1, 2, goodEnv(1), ids("GPU-n1-1", 0, 2))},
		{name: "other card in env", pod: admitted("p", 1, 2, goodEnv(0), ids("GPU-n1-1", 0, 2)), wantProblem: "NVIDIA_VISIBLE_DEVICES=GPU-n1-0, annotation says GPU-n1-1"},
		{name: "other index in env", pod: admitted("p", 1, 2, map[string]string{deviceplugin.EnvVisibleDevices: "GPU-n1-1", gpushare.AnnotationIndex: "0"}, ids("GPU-n1-1", 0, 2)),
			wantProblem: "ALIYUN_COM_GPU_MEM_IDX=0, annotation says 1"},
		{name: "kubelet's devices on another card", pod: admitted("p", 1, 2, goodEnv(1), ids("GPU-n1-0", 0, 2)), wantProblem: "kubelet's devices hold"},
		{name: "kubelet holds fewer units", pod: admitted("p", 1, 2, goodEnv(1), ids("GPU-n1-1", 0, 1)), wantProblem: "kubelet's devices hold"},
		{name: "container not admitted", pod: func() *corev1.Pod {
			p := admitted("p", 1, 2, goodEnv(1), nil)
			p.Annotations[nodeagent.AnnotationEnv] = "{}"
			return p
		}(), wantProblem: "not admitted"},
		{name: "annotation for another node", pod: func() *corev1.Pod {
			p := admitted("p", 1, 2, goodEnv(1), ids("GPU-n1-1", 0, 2))
			p.Spec.NodeName = "n2"
			return p
		}(),
			wantProblem: "the annotation is for node n1, the pod is on n2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := Rows(tc.pod)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 {
				t.Fatalf("%d rows, want 1", len(rows))
			}
			if got := rows[0].Problem; tc.wantProblem == "" && got != "" || !strings.Contains(got, tc.wantProblem) {
				t.Errorf("problem %q, want one containing %q", got, tc.wantProblem)
			}
		})
	}
}

func TestCheckCards(t *testing.T) {
	n1 := *util.MakeNode("n1").Cards("T4", 4, 4).Obj()
	tests := []struct {
		name string
		pods []*corev1.Pod
		want []string
	}{
		{name: "fits", pods: []*corev1.Pod{
			admitted("a", 0, 2, goodEnv(0), ids("GPU-n1-0", 0, 2)),
			admitted("b", 0, 2, goodEnv(0), ids("GPU-n1-0", 2, 2)),
		}},
		{name: "over-committed by the annotations", pods: []*corev1.Pod{
			admitted("a", 1, 3, goodEnv(1), ids("GPU-n1-1", 0, 3)),
			admitted("b", 1, 2, goodEnv(1), nil),
		}, want: []string{"node n1 card 1 holds 5 GiB by the annotations, has 4"}},
		{name: "a device held twice", pods: []*corev1.Pod{
			admitted("a", 0, 2, goodEnv(0), ids("GPU-n1-0", 0, 2)),
			admitted("b", 0, 2, goodEnv(0), ids("GPU-n1-0", 1, 2)),
		}, want: []string{"device GPU-n1-0::1 of node n1 held by pods default/a and default/b"}},
		{name: "a unit the card does not have", pods: []*corev1.Pod{
			admitted("a", 0, 1, goodEnv(0), ids("GPU-n1-0", 4, 1)),
		}, want: []string{"pod default/a holds device GPU-n1-0::4, which node n1's cards do not have"}},
		{name: "finished pods hold nothing", pods: []*corev1.Pod{
			admitted("a", 1, 4, goodEnv(1), ids("GPU-n1-1", 0, 4)),
			func() *corev1.Pod {
				p := admitted("b", 1, 4, goodEnv(1), ids("GPU-n1-1", 0, 4))
				p.Status.Phase = corev1.PodSucceeded
				return p
			}(),
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var pods []corev1.Pod
			for _, p := range tc.pods {
				pods = append(pods, *p)
			}
			got := CheckCards([]corev1.Node{n1}, pods)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("violations (-want +got):\n%s", diff)
			}
		})
	}
}
