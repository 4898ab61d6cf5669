package nodeagent

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/util"
)

// testCards: two 16 GiB cards and an 80 GiB one.
var testCards = []handoff.Card{
	{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "T4"}, Units: 16},
	{Card: gpushare.Card{Index: 1, UUID: "GPU-1", Model: "T4"}, Units: 16},
	{Card: gpushare.Card{Index: 2, UUID: "GPU-2", Model: "A100"}, Units: 80},
}

// TestPublisher: the inventory annotation follows the cards' health, and
// an aliyun.com/gpu-count capacity (an older plugin's, or Aliyun's) is
// removed: kubelet would count it as a consumable resource and refuse a
// third 2-card pod on four cards.
func TestPublisher(t *testing.T) {
	client := fake.NewClientset(util.MakeNode("n1").Capacity(112, 3).Obj())
	p := &Publisher{API: ClientAPI{Client: client}, Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards}
	ctx := context.Background()
	if err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	p.SetHealth(map[string]bool{"GPU-1": true})
	if err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	patches := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "patch" {
			patches++
		}
	}
	// annotation + the capacity's removal, then the annotation again.
	if patches != 3 {
		t.Errorf("%d patches, want 3: %v", patches, client.Actions())
	}
	node, err := client.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	inv, err := gpushare.ParseInventory(node.Annotations[gpushare.AnnotationInventory])
	if err != nil {
		t.Fatal(err)
	}
	want := &gpushare.Inventory{Unit: "GiB", Devices: []gpushare.Device{
		{Index: 0, UUID: "GPU-0", Model: "T4", Memory: 16, Healthy: true},
		{Index: 1, UUID: "GPU-1", Model: "T4", Memory: 16, Healthy: false},
		{Index: 2, UUID: "GPU-2", Model: "A100", Memory: 80, Healthy: true},
	}}
	if diff := cmp.Diff(want, inv); diff != "" {
		t.Errorf("inventory mismatch (-want +got):\n%s", diff)
	}
	for _, rl := range []corev1.ResourceList{node.Status.Capacity, node.Status.Allocatable} {
		if q, ok := rl[gpushare.ResourceGPUCount]; ok {
			t.Errorf("gpu-count %s still published", q.String())
		}
	}
	if q := node.Status.Capacity[gpushare.ResourceGPUMem]; q.Value() != 112 {
		t.Errorf("gpu-mem capacity %s, want 112 (kubelet's, untouched)", q.String())
	}
}
