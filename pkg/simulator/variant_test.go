package simulator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// TestGPUSpecVariantConstrainsPlacement: the models a GPU-model variant
// gives a pod bind the replay, for every policy, exactly as a gpu_spec read
// from a file does: no constrained pod lands on a card of another model.
// With GPUSpecAsLabel the one-model constraints are nodeSelectors on the
// product label instead, and bind the same way.
func TestGPUSpecVariantConstrainsPlacement(t *testing.T) {
	for _, asLabel := range []bool{false, true} {
		t.Run(fmt.Sprintf("asLabel=%v", asLabel), func(t *testing.T) { testGPUSpecVariant(t, asLabel) })
	}
}

func testGPUSpecVariant(t *testing.T, asLabel bool) {
	var nodes, pods strings.Builder
	for i := range 6 {
		fmt.Fprintf(&nodes, "n%d,64000,65536,2,%s\n", i, []string{"T4", "V100M32", "P100"}[i%3])
	}
	for i := range 10 {
		fmt.Fprintf(&pods, "p%d,1000,1024,1,%d,\n", i, 300+50*i)
	}
	tr := tinyTrace(t, nodes.String(), pods.String())
	v := trace.Variant{GPUSpecShare: 1, GPUSpecAsLabel: asLabel, Seed: 3}
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
		labelled := p.NodeSelector[gpushare.NVIDIALabelProduct] != ""
		if want := asLabel && len(p.Models) == 1; labelled != want || (p.Constraints == nil) != want {
			t.Errorf("pod %s (models %v): nodeSelector %v, constraints %v; want the nodeSelector alone: %v", p.Name, p.Models, p.NodeSelector, p.Constraints, want)
		}
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

// mixedModels is a trace of nodes of 1 to 4 cards of models, in turn, and
// pods: every cpuOnlyEvery-th asks no GPU memory, every twoCardsEvery-th
// (of the rest) two whole cards, the others a part of one.
func mixedModels(t *testing.T, models []string, nodes, pods, cpuOnlyEvery, twoCardsEvery int) *trace.Trace {
	t.Helper()
	var ns, ps strings.Builder
	for i := range nodes {
		fmt.Fprintf(&ns, "n%d,32000,65536,%d,%s\n", i, 1+i%4, models[i%len(models)])
	}
	for i := range pods {
		switch {
		case i%cpuOnlyEvery == 0:
			fmt.Fprintf(&ps, "p%d,2000,4096,0,0,\n", i)
		case i%twoCardsEvery == 0:
			fmt.Fprintf(&ps, "p%d,4000,8192,2,1000,\n", i)
		default:
			fmt.Fprintf(&ps, "p%d,1000,2048,1,%d,\n", i, 100+97*i%900)
		}
	}
	return tinyTrace(t, ns.String(), ps.String())
}

// TestGPUSpecAsLabelPlacesAsTheAnnotation: on nodes of one model each,
// and a cluster small enough that kube-scheduler examines every node, a
// model chosen by a nodeSelector on the product label places every pod
// where the same model in gpushare.io/gpu-models does: kube-scheduler's
// NodeAffinity removes the nodes the extender's card filter would.
func TestGPUSpecAsLabelPlacesAsTheAnnotation(t *testing.T) {
	tr := mixedModels(t, []string{"T4", "V100M32", "P100", "A10"}, 12, 60, 7, 5)
	placements := func(asLabel bool, policy string) (map[string]string, int) {
		out, err := (&trace.Variant{GPUSpecShare: 0.7, GPUSpecAsLabel: asLabel, Seed: 5}).Apply(tr)
		if err != nil {
			t.Fatal(err)
		}
		labelled := 0
		for _, p := range out.Pods {
			if p.NodeSelector != nil {
				labelled++
			}
		}
		res, err := Run(context.Background(), out, Options{Policy: policy, Seed: 2, Record: true})
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, d := range res.Decisions {
			got[d.Pod] = fmt.Sprintf("%s %v", d.Node, d.Cards)
		}
		return got, labelled
	}
	for _, policy := range allocator.PolicyNames() {
		ann, _ := placements(false, policy)
		lab, labelled := placements(true, policy)
		if labelled == 0 {
			t.Fatal("no pod got a nodeSelector; the test compares nothing")
		}
		if diff := cmp.Diff(ann, lab); diff != "" {
			t.Errorf("%s: placements differ (-annotation +label):\n%s", policy, diff)
		}
	}
}

// TestRestrictedPodsKeepToTheirModels: whatever the variant (one to three
// models per pod, by annotation or by label) and the policy, a pod
// restricted to some models is placed only on nodes of those models. The
// model term steers pods to models; it must never let one through to
// another.
func TestRestrictedPodsKeepToTheirModels(t *testing.T) {
	tr := mixedModels(t, []string{"T4", "V100M32", "P100", "A10", "G2"}, 20, 120, 9, 6)
	modelOf := map[string]string{}
	for _, n := range tr.Nodes {
		modelOf[n.Name] = n.Model
	}
	for _, limit := range []int{1, 2, 3} {
		for _, asLabel := range []bool{false, true} {
			out, err := (&trace.Variant{GPUSpecShare: 0.35, GPUSpecModels: limit, GPUSpecAsLabel: asLabel, Seed: uint64(limit)}).Apply(tr)
			if err != nil {
				t.Fatal(err)
			}
			allowed := map[string][]string{}
			restricted, most := 0, 0
			for _, p := range out.Pods {
				if len(p.Models) > 0 {
					allowed[p.Name] = p.Models
					restricted++
					most = max(most, len(p.Models))
				}
			}
			if most != limit {
				t.Errorf("models ≤ %d: the pods name at most %d models, want %d", limit, most, limit)
			}
			if restricted == 0 {
				t.Fatal("the variant restricted no pod; the test checks nothing")
			}
			for _, policy := range allocator.PolicyNames() {
				res, err := Run(context.Background(), out, Options{Policy: policy, Seed: 3, Record: true})
				if err != nil {
					t.Fatal(err)
				}
				placed := 0
				for _, d := range res.Decisions {
					ms, ok := allowed[d.Pod]
					if !ok || d.Node == "" {
						continue
					}
					placed++
					if !slices.Contains(ms, modelOf[d.Node]) {
						t.Errorf("models ≤ %d, label %v, %s: pod %s (models %v) placed on %s, a %s", limit, asLabel, policy, d.Pod, ms, d.Node, modelOf[d.Node])
					}
				}
				if placed == 0 {
					t.Errorf("models ≤ %d, label %v, %s: no restricted pod placed; the test checks nothing", limit, asLabel, policy)
				}
			}
		}
	}
}
