package nodeagent

import (
	"context"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/util"
)

// labelCards: two Tesla T4 cards (15360 MiB) in driver mode.
var labelCards = []handoff.Card{
	{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "Tesla T4", MemoryMiB: 15360}, Units: 15, Isolation: gpushare.IsolationDriver},
	{Card: gpushare.Card{Index: 1, UUID: "GPU-1", Model: "Tesla T4", MemoryMiB: 15360}, Units: 15, Isolation: gpushare.IsolationDriver},
}

func TestNodeLabels(t *testing.T) {
	drv := &gpu.Driver{Version: "550.54.15", CUDAVersion: 12040}
	tests := []struct {
		name       string
		cards      []handoff.Card
		unhealthy  map[string]bool
		drv        *gpu.Driver
		own, nvidi map[string]string
	}{{
		name: "healthy cards and a driver", cards: labelCards, drv: drv,
		own: map[string]string{
			gpushare.LabelProduct: "Tesla-T4", gpushare.LabelMemory: "15360", gpushare.LabelCount: "2",
			gpushare.LabelDriver: "550.54.15", gpushare.LabelCUDA: "12.4", gpushare.LabelIsolation: "driver",
		},
		nvidi: map[string]string{
			gpushare.NVIDIALabelProduct: "Tesla-T4", gpushare.NVIDIALabelMemory: "15360", gpushare.NVIDIALabelCount: "2",
			gpushare.NVIDIALabelDriverFull: "550.54.15", gpushare.NVIDIALabelDriverMajor: "550", gpushare.NVIDIALabelDriverMinor: "54",
			gpushare.NVIDIALabelDriverRev: "15", gpushare.NVIDIALabelRuntimeFull: "12.4", gpushare.NVIDIALabelRuntimeMajor: "12",
			gpushare.NVIDIALabelRuntimeMinor: "4",
		},
	}, {
		name: "a failed card, no driver, mixed isolation",
		cards: []handoff.Card{
			{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920}, Isolation: gpushare.IsolationMPS},
			{Card: gpushare.Card{Index: 1, UUID: "GPU-1", Model: "NVIDIA A100-SXM4-80GB", MemoryMiB: 81920}},
		},
		unhealthy: map[string]bool{"GPU-1": true},
		own: map[string]string{
			gpushare.LabelProduct: "NVIDIA-A100-SXM4-80GB", gpushare.LabelMemory: "81920", gpushare.LabelCount: "1", gpushare.LabelIsolation: "mixed",
		},
		nvidi: map[string]string{gpushare.NVIDIALabelProduct: "NVIDIA-A100-SXM4-80GB", gpushare.NVIDIALabelMemory: "81920", gpushare.NVIDIALabelCount: "1"},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			own, nvidia := nodeLabels(tc.cards, tc.unhealthy, tc.drv)
			if diff := cmp.Diff(tc.own, own); diff != "" {
				t.Errorf("own labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.nvidi, nvidia); diff != "" {
				t.Errorf("GFD-form labels (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPublisherLabels follows a node's labels as its cards fail and
// recover, and as another component takes over the GFD-form labels.
func TestPublisherLabels(t *testing.T) {
	ctx := context.Background()
	node := util.MakeNode("n1").Obj()
	node.Labels = map[string]string{"kubernetes.io/hostname": "n1"}
	client := fake.NewClientset(node)
	p := &Publisher{API: ClientAPI{Client: client}, Node: "n1", Unit: gpushare.UnitGiB, Cards: labelCards,
		Driver: &gpu.Driver{Version: "615.00", CUDAVersion: 13040}}
	labels := func() map[string]string {
		t.Helper()
		if err := p.Publish(ctx); err != nil {
			t.Fatal(err)
		}
		n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n.Labels
	}
	got := labels()
	want := map[string]string{"kubernetes.io/hostname": "n1",
		gpushare.LabelProduct: "Tesla-T4", gpushare.LabelMemory: "15360", gpushare.LabelCount: "2", gpushare.LabelDriver: "615.00",
		gpushare.LabelCUDA: "13.4", gpushare.LabelIsolation: "driver",
		gpushare.NVIDIALabelProduct: "Tesla-T4", gpushare.NVIDIALabelMemory: "15360", gpushare.NVIDIALabelCount: "2",
		gpushare.NVIDIALabelDriverFull: "615.00", gpushare.NVIDIALabelDriverMajor: "615", gpushare.NVIDIALabelDriverMinor: "00",
		gpushare.NVIDIALabelRuntimeFull: "13.4", gpushare.NVIDIALabelRuntimeMajor: "13", gpushare.NVIDIALabelRuntimeMinor: "4"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("labels (-want +got):\n%s", diff)
	}

	p.SetHealth(map[string]bool{"GPU-1": true})
	if got := labels(); got[gpushare.LabelCount] != "1" || got[gpushare.NVIDIALabelCount] != "1" {
		t.Errorf("after a card failed: count %q, GFD form %q; want 1", got[gpushare.LabelCount], got[gpushare.NVIDIALabelCount])
	}
	p.SetHealth(nil)
	if got := labels(); got[gpushare.LabelCount] != "2" || got[gpushare.NVIDIALabelCount] != "2" {
		t.Errorf("after it recovered: count %q, GFD form %q; want 2", got[gpushare.LabelCount], got[gpushare.NVIDIALabelCount])
	}
	before := len(client.Actions())
	labels()
	for _, a := range client.Actions()[before:] {
		if a.GetVerb() == "patch" {
			t.Errorf("a publish that changes nothing patched the node: %v", a)
		}
	}

	// GPU Feature Discovery arrives and writes its own count: the plugin
	// leaves every GFD-form label alone from then on, and keeps its own.
	n, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels[gpushare.NVIDIALabelCount] = "8"
	n.Labels[gpushare.NVIDIALabelProduct] = "Tesla-T4-SHARED"
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.SetHealth(map[string]bool{"GPU-0": true})
	got = labels()
	if got[gpushare.NVIDIALabelCount] != "8" || got[gpushare.NVIDIALabelProduct] != "Tesla-T4-SHARED" || got[gpushare.LabelCount] != "1" {
		t.Errorf("after GFD took over: GFD count %q product %q, own count %q; want 8, Tesla-T4-SHARED, 1",
			got[gpushare.NVIDIALabelCount], got[gpushare.NVIDIALabelProduct], got[gpushare.LabelCount])
	}
	n, _ = client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if _, ok := n.Annotations[gpushare.AnnotationNVIDIALabels]; ok {
		t.Errorf("the record of GFD-form labels outlived the takeover")
	}
}

func TestLabelPatchLeavesOthersLabels(t *testing.T) {
	own, nvidia := nodeLabels(labelCards, nil, nil)
	tests := []struct {
		name   string
		labels map[string]string
		ann    map[string]string
		// nvidiaWritten: the patch writes GFD-form labels.
		nvidiaWritten bool
	}{
		{name: "a bare node", nvidiaWritten: true},
		{name: "GFD's timestamp", labels: map[string]string{gpushare.GFDTimestampLabel: "1700000000"}},
		{name: "node-feature-discovery lists an nvidia.com label",
			ann: map[string]string{gpushare.NFDFeatureLabelsAnnotation: "cpu-model.family,nvidia.com/gpu.family"}},
		{name: "a GFD-form label the plugin did not write", labels: map[string]string{gpushare.NVIDIALabelCount: "2"}},
		{name: "other labels only", labels: map[string]string{"nvidia.com/mig.strategy": "single", "zone": "a"}, nvidiaWritten: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: tc.labels, Annotations: tc.ann}}
			labels, _ := labelPatch(node, own, nvidia)
			wrote := slices.ContainsFunc(gpushare.NVIDIALabels, func(k string) bool { _, ok := labels[k]; return ok })
			if wrote != tc.nvidiaWritten {
				t.Errorf("GFD-form labels written: %v, want %v (%v)", wrote, tc.nvidiaWritten, labels)
			}
			for k := range tc.labels {
				if _, ok := labels[k]; ok {
					t.Errorf("the patch touches label %s, which is not the plugin's", k)
				}
			}
			if _, ok := labels[gpushare.LabelCount]; !ok {
				t.Errorf("the plugin's own labels are not written: %v", labels)
			}
		})
	}
}

// TestAdmissionPolicyAllowsTheLabels: the node-scope policy lets the
// plugin write exactly the labels it publishes.
func TestAdmissionPolicyAllowsTheLabels(t *testing.T) {
	for _, file := range []string{"../../manifests/deviceplugin/admission-policy.yaml", "../../manifests/charts/gpushare/templates/admission-policies.yaml"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(`(?s)- name: allowedLabels\n\s+expression: >-\n(.*?)\n  - name:`).FindSubmatch(b)
		if m == nil {
			t.Fatalf("%s: no allowedLabels variable", file)
		}
		var got []string
		for _, q := range regexp.MustCompile(`'([^']+)'`).FindAllSubmatch(m[1], -1) {
			if s := string(q[1]); s != "pods" {
				got = append(got, s)
			}
		}
		want := append(slices.Clone(gpushare.OwnLabels), gpushare.NVIDIALabels...)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s allowedLabels (-code +policy):\n%s", file, diff)
		}
	}
}
