package simulator

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/pkg/allocator"
)

// TestGPUSpecVariantConstrainsPlacement: the models a GPU-model variant
// gives a pod bind the replay, for every policy, exactly as a gpu_spec read
// from a file does: no constrained pod lands on a card of another model.
func TestGPUSpecVariantConstrainsPlacement(t *testing.T) {
	var nodes, pods strings.Builder
	for i := range 6 {
		fmt.Fprintf(&nodes, "n%d,64000,65536,2,%s\n", i, []string{"T4", "V100M32", "P100"}[i%3])
	}
	for i := range 10 {
		fmt.Fprintf(&pods, "p%d,1000,1024,1,%d,\n", i, 300+50*i)
	}
	tr := tinyTrace(t, nodes.String(), pods.String())
	v := Variant{GPUSpecShare: 1, Seed: 3}
	out, err := v.Apply(tr)
	if err != nil {
		t.Fatal(err)
	}
	model := map[string]string{}
	for _, n := range out.Nodes {
		model[n.Name] = n.Model
	}
	wantModels := map[string][]string{}
	for _, p := range out.Pods {
		if len(p.Models) == 0 {
			t.Fatalf("pod %s has no models with GPUSpecShare 1", p.Name)
		}
		wantModels[p.Name] = p.Models
	}
	for _, policy := range allocator.PolicyNames() {
		res, err := Run(context.Background(), out, Options{Policy: policy, Seed: 1, Record: true})
		if err != nil {
			t.Fatal(err)
		}
		placed := 0
		for _, d := range res.Decisions {
			ms, ok := wantModels[strings.SplitN(d.Pod, "-", 2)[0]]
			if !ok || d.Node == "" {
				continue
			}
			placed++
			if !strings.Contains("|"+strings.Join(ms, "|")+"|", "|"+model[d.Node]+"|") {
				t.Errorf("%s: pod %s asks models %v, placed on %s (%s)", policy, d.Pod, ms, d.Node, model[d.Node])
			}
		}
		if placed == 0 {
			t.Errorf("%s: no pod placed; the test exercises nothing", policy)
		}
	}
}
