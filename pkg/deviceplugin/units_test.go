package deviceplugin

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/util"
)

func TestUnits(t *testing.T) {
	tests := []struct {
		name   string
		memMiB int64
		unit   string
		want   int64
	}{
		{name: "T4 in GiB rounds down", memMiB: 15360, unit: gpushare.UnitGiB, want: 15},
		{name: "A100 80GB in GiB", memMiB: 81920, unit: gpushare.UnitGiB, want: 80},
		{name: "A100 40GB in MiB", memMiB: 40960, unit: gpushare.UnitMiB, want: 40960},
		{name: "under a GiB", memMiB: 1023, unit: gpushare.UnitGiB, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Units(tc.memMiB, tc.unit); got != tc.want {
				t.Errorf("Units(%d, %s) = %d, want %d", tc.memMiB, tc.unit, got, tc.want)
			}
		})
	}
}

// TestListAndWatchBytes checks the arithmetic against the encoded size of
// the response the server really sends, all units unhealthy.
func TestListAndWatchBytes(t *testing.T) {
	tests := []struct {
		name string
		spec string
		unit string
	}{
		{name: "one T4 in GiB", spec: "1xT4:16GiB", unit: gpushare.UnitGiB},
		{name: "heterogeneous in GiB", spec: "2xTesla-T4:16GiB,1xA100-SXM4:80GiB", unit: gpushare.UnitGiB},
		{name: "digit boundaries in MiB", spec: "1xA:10MiB,1xB:100MiB,1xC:1000MiB,1xD:12345MiB", unit: gpushare.UnitMiB},
		{name: "A100 in MiB", spec: "1xA100:80GiB", unit: gpushare.UnitMiB},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := gpu.ParseFakeGPUs(tc.spec, "n")
			if err != nil {
				t.Fatal(err)
			}
			cards, err := CardsOf("n", devs, tc.unit)
			if err != nil {
				t.Fatal(err)
			}
			s := NewServer(testLogger(t), nil, cards, tc.unit, StrategyEnvvar, nil)
			unhealthy := map[string]bool{}
			for _, c := range cards {
				unhealthy[c.UUID] = true
			}
			s.SetHealth(unhealthy)
			want := int64(proto.Size(&pluginapi.ListAndWatchResponse{Devices: s.devices}))
			if got := ListAndWatchBytes(devs, tc.unit); got != want {
				t.Errorf("ListAndWatchBytes = %d, encoded response is %d bytes", got, want)
			}
		})
	}
}

func TestCheckMessageSize(t *testing.T) {
	tests := []struct {
		name    string
		spec    string
		unit    string
		wantErr string
	}{
		{name: "8 A100 in GiB fit", spec: "8xA100:80GiB", unit: gpushare.UnitGiB},
		{name: "2 T4 in MiB fit", spec: "2xT4:16GiB", unit: gpushare.UnitMiB},
		{name: "one A100 80GB in MiB does not", spec: "1xA100:80GiB", unit: gpushare.UnitMiB,
			wantErr: "--memory-unit MiB would advertise 81920 aliyun.com/gpu-mem devices on node n in a ListAndWatch message of 4.8 MiB, over kubelet's 4.0 MiB gRPC limit; use --memory-unit GiB (4.6 KiB)"},
		{name: "8 A100 in MiB does not", spec: "8xA100:80GiB", unit: gpushare.UnitMiB, wantErr: "use --memory-unit GiB"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			devs, err := gpu.ParseFakeGPUs(tc.spec, "n")
			if err != nil {
				t.Fatal(err)
			}
			err = CheckMessageSize("n", devs, tc.unit)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("CheckMessageSize error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCardsOf(t *testing.T) {
	devs := []gpu.Device{{Card: gpushare.Card{Index: 0, UUID: "GPU-a", Model: "tiny", MemoryMiB: 512}}}
	if _, err := CardsOf("n", devs, gpushare.UnitGiB); err == nil || !strings.Contains(err.Error(), "use --memory-unit MiB") {
		t.Errorf("CardsOf with a 512 MiB card in GiB: error %v", err)
	}
	if _, err := CardsOf("n", nil, gpushare.UnitGiB); err == nil || !strings.Contains(err.Error(), "no GPUs found on node n") {
		t.Errorf("CardsOf without cards: error %v", err)
	}
}

func TestCheckUnitChange(t *testing.T) {
	gib := util.MakeNode("n1").Cards("Tesla-T4", 16).Obj() // inventory in GiB
	junk := util.MakeNode("n1").Obj()
	junk.Annotations = map[string]string{gpushare.AnnotationInventory: "junk"}
	holding := func(names ...string) []handoff.KubeletPod {
		var out []handoff.KubeletPod
		for _, n := range names {
			out = append(out, handoff.KubeletPod{Namespace: "default", Name: n, Containers: map[string][]string{"c0": {"GPU-0::0"}, "log": nil}})
		}
		return out
	}
	many := make([]string, 12)
	for i := range many {
		many[i] = fmt.Sprintf("p%02d", i)
	}
	tests := []struct {
		name    string
		node    *corev1.Node
		unit    string
		kubelet *fakeKubelet
		wantErr []string // substrings; none: no error
	}{
		{name: "never published", node: util.MakeNode("n1").Obj(), unit: gpushare.UnitMiB, kubelet: &fakeKubelet{pods: holding("a")}},
		{name: "unreadable inventory, replaced", node: junk, unit: gpushare.UnitMiB,
			kubelet: &fakeKubelet{pods: holding("a")}},
		{name: "same unit", node: gib, unit: gpushare.UnitGiB, kubelet: &fakeKubelet{pods: holding("a")}},
		{name: "changed on an idle node", node: gib, unit: gpushare.UnitMiB,
			kubelet: &fakeKubelet{pods: []handoff.KubeletPod{{Namespace: "default", Name: "cpu", Containers: map[string][]string{"c0": nil}}}}},
		{name: "changed while pods hold devices", node: gib, unit: gpushare.UnitMiB, kubelet: &fakeKubelet{pods: holding("b", "a")},
			wantErr: []string{"node n1: --memory-unit MiB, but its devices were published in GiB and kubelet lists 2 pod(s) holding aliyun.com/gpu-mem devices in GiB: default/a, default/b;",
				"Drain the GPU pods from the node (kubectl drain n1, or delete them) and start the plugin again, or start it with --memory-unit GiB"}},
		{name: "many pods named up to a limit", node: gib, unit: gpushare.UnitMiB, kubelet: &fakeKubelet{pods: holding(many...)},
			wantErr: []string{"12 pod(s)", "default/p09 and 2 more;"}},
		{name: "changed and PodResources down", node: gib, unit: gpushare.UnitMiB, kubelet: &fakeKubelet{err: errors.New("connection refused")},
			wantErr: []string{"whether containers still hold GiB devices cannot be told: connection refused", "or with --memory-unit GiB"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			err := CheckUnitChange(ctx, ClientAPI{Client: fake.NewClientset(tc.node)}, tc.kubelet, "n1", tc.unit)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			for _, want := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Errorf("error = %v, want one containing %q", err, want)
				}
			}
		})
	}
}
