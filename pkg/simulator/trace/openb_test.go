package trace

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

func TestReadOpenbNodes(t *testing.T) {
	got, err := ReadOpenbNodes(strings.NewReader("sn,cpu_milli,memory_mib,gpu,model\nn1,96000,393216,2,G2\nn2,64000,262144,0,\n"), "nodes.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []Node{
		{Name: "n1", MilliCPU: 96000, MemoryMiB: 393216, Model: "G2", Unit: "milli", Cards: []allocator.Card{
			{Index: 0, Total: 1000, Healthy: true, Info: &allocator.CardInfo{Model: "G2"}}, {Index: 1, Total: 1000, Healthy: true, Info: &allocator.CardInfo{Model: "G2"}}},
			// What the device plugin would label such a node with.
			Labels: map[string]string{"gpushare.io/gpu.product": "G2", "nvidia.com/gpu.product": "G2", "gpushare.io/gpu.count": "2", "nvidia.com/gpu.count": "2"}},
		{Name: "n2", MilliCPU: 64000, MemoryMiB: 262144, Unit: "milli",
			Labels: map[string]string{"gpushare.io/gpu.count": "0", "nvidia.com/gpu.count": "0"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("nodes (-want +got):\n%s", diff)
	}
}

func TestReadOpenbPods(t *testing.T) {
	// The multigpu files have no gpu_spec column; columns are found by name.
	got, err := ReadOpenbPods(strings.NewReader(
		"name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos\n"+
			"share,6000,12288,1,460,,LS\n"+
			"whole,12000,16384,1,1000,P100|T4,BE\n"+
			"multi,88000,327680,8,1000,,LS\n"+
			"cpu,8000,30517,0,0,,BE\n"), "pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	want := []Pod{
		{Name: "share", MilliCPU: 6000, MemoryMiB: 12288, Demand: gpushare.Demand{{Name: "main", Units: 460, Cards: 1}}, Kind: KindShare},
		{Name: "whole", MilliCPU: 12000, MemoryMiB: 16384, Demand: gpushare.Demand{{Name: "main", Units: 1000, Cards: 1}}, Models: []string{"P100", "T4"},
			Constraints: &gpushare.CardConstraints{Models: []string{"P100", "T4"}}, Kind: KindWhole},
		{Name: "multi", MilliCPU: 88000, MemoryMiB: 327680, Demand: gpushare.Demand{{Name: "main", Units: 1000, Cards: 8}}, Kind: KindMulti},
		{Name: "cpu", MilliCPU: 8000, MemoryMiB: 30517, Kind: KindCPU},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("pods (-want +got):\n%s", diff)
	}
}

func TestReadOpenbErrors(t *testing.T) {
	const podHeader = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
	tests := []struct {
		name  string
		nodes bool // read as a node list
		input string
		want  string
	}{
		{"empty", true, "", "nodes.csv: empty file; want a header row \"sn,cpu_milli,memory_mib,gpu,model\""},
		{"no rows", true, "sn,cpu_milli,memory_mib,gpu,model\n", "nodes.csv: no nodes after the header"},
		{"missing column", true, "sn,cpu_milli,gpu,model\nn1,1,1,T4\n",
			`nodes.csv:1:1: header has no column "memory_mib"; want at least sn,cpu_milli,memory_mib,gpu,model`},
		{"not a number", true, "sn,cpu_milli,memory_mib,gpu,model\nn1,96000,lots,2,G2\n", `nodes.csv:2:10: memory_mib is "lots"; want a whole number`},
		{"negative", true, "sn,cpu_milli,memory_mib,gpu,model\nn1,-5,1,2,G2\n", "nodes.csv:2:4: cpu_milli is -5; want 0 to 1099511627776"},
		{"too many cards", true, "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,4096,G2\n", "nodes.csv:2:8: gpu is 4096; want 0 to 64"},
		{"duplicate node", true, "sn,cpu_milli,memory_mib,gpu,model\nn1,1,1,1,G2\nn1,1,1,1,G2\n", "nodes.csv:3:1: node n1 appears twice (first on line 2)"},
		{"bad quoting", true, "sn,cpu_milli,memory_mib,gpu,model\n\"n1,1,1,1,G2\n", `nodes.csv:2:14: extraneous or missing " in quoted-field`},
		{"missing pod column", false, "name,cpu_milli,memory_mib,num_gpu\np,1,1,1\n",
			`pods.csv:1:1: header has no column "gpu_milli"; want at least name,cpu_milli,memory_mib,num_gpu,gpu_milli (optional: gpu_spec)`},
		{"empty cell", false, podHeader + "p,,1,1,500\n", "pods.csv:2:3: cpu_milli is empty; want a whole number"},
		{"too much of a card", false, podHeader + "p,1,1,1,1500\n", "pods.csv:2:9: gpu_milli is 1500; want 0 to 1000"},
		{"share of nothing", false, podHeader + "p,1,1,1,0\n", "pods.csv:2:9: gpu_milli is 0 with num_gpu 1; want 1 to 1000"},
		{"CPU task asks GPU", false, podHeader + "p,1,1,0,200\n", "pods.csv:2:9: gpu_milli is 200 with num_gpu 0; a CPU-only task asks gpu_milli 0"},
		{"partial multi-GPU", false, podHeader + "p,1,1,2,500\n", "pods.csv:2:9: gpu_milli is 500 with num_gpu 2; a multi-GPU task asks whole cards (gpu_milli 1000)"},
		{"duplicate pod", false, podHeader + "p,1,1,1,500\np,1,1,1,500\n", "pods.csv:3:1: pod p appears twice (first on line 2)"},
		{"no name", false, podHeader + ",1,1,1,500\n", "pods.csv:2:1: name is empty"},
		{"pattern in gpu_spec", false, "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1,1,1,500,V100*\n",
			`pods.csv:2:13: gpu_spec model "V100*" has a pattern character; gpu_spec names models exactly`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.nodes {
				_, err = ReadOpenbNodes(strings.NewReader(tc.input), "nodes.csv")
			} else {
				_, err = ReadOpenbPods(strings.NewReader(tc.input), "pods.csv")
			}
			got := "<nil>"
			if err != nil {
				got = err.Error()
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}
