package deviceplugin

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

func TestPublisher(t *testing.T) {
	client := fake.NewClientset(util.MakeNode("n1").Obj())
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
	// annotation + capacity, then the annotation again; not the capacity.
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
	c, a := node.Status.Capacity[gpushare.ResourceGPUCount], node.Status.Allocatable[gpushare.ResourceGPUCount]
	if c.Value() != 3 || a.Value() != 3 {
		t.Errorf("gpu-count capacity %s allocatable %s, want 3", c.String(), a.String())
	}
}
