package simulator

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// TestOpenbGPUSpecThroughFit: gpu_spec goes through the extender's card
// predicate (allocator.FitWith): exact names, so "A10" is not an A100, and
// each card's own model decides.
func TestOpenbGPUSpecThroughFit(t *testing.T) {
	tr := tinyTrace(t, "a100,64000,65536,1,A100\na10,64000,65536,1,A10\n", "p,1000,1024,1,600,A10\nq,1000,1024,1,600,A100|V100M32\nr,1000,1024,1,600,G3\n")
	tr.Nodes[1].Cards = append(tr.Nodes[1].Cards, allocator.Card{Index: 1, Total: trace.OpenbMilli, Healthy: true, Info: &allocator.CardInfo{Model: "G3"}})
	res, err := Run(context.Background(), tr, Options{Policy: allocator.NameBinpack, Seed: 1, Record: true, Inflate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][][]int{}
	for _, d := range res.Decisions {
		got[d.Pod+" on "+d.Node] = d.Cards
	}
	want := map[string][][]int{"p on a10": {{0}}, "q on a100": {{0}}, "r on a10": {{1}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("decisions (-want +got):\n%s", diff)
	}
}

// TestGPUSpecDoesNotNarrowTheSample: kube-scheduler knows nothing of which
// cards a pod may use, so nodes of other models count in its sample as
// they do in a cluster. 120 nodes (100 per cycle, by name): the first 100
// T4, the last 20 A100. A pod asking an A100 finds none in the first
// cycle's sample and takes a second cycle, as it would wait for
// kube-scheduler's retry.
func TestGPUSpecDoesNotNarrowTheSample(t *testing.T) {
	var nodes strings.Builder
	for i := range 120 {
		model := "T4"
		if i >= 100 {
			model = "A100"
		}
		fmt.Fprintf(&nodes, "n%03d,64000,65536,1,%s\n", i, model)
	}
	tr := tinyTrace(t, nodes.String(), "p,1000,1024,1,500,A100\n")
	res, err := Run(context.Background(), tr, Options{Policy: allocator.NameBinpack, Seed: 1, Record: true, Inflate: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	if d := res.Decisions[0]; d.Cycles != 2 || d.Node < "n100" {
		t.Errorf("decision %+v, want an A100 node after 2 cycles", d)
	}
}
