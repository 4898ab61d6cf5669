package simulator

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
	"k8s.io/utils/ptr"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const (
	sliceNodes = "testdata/openb-slice/nodes.csv"
	slicePods  = "testdata/openb-slice/pods.csv"
)

// sliceSummaries replays the slice of the default trace with every policy,
// seeds 1-3, CPU-only pods handled as cpuPods says, wall times zeroed.
func sliceSummaries(t *testing.T, cpuPods CPUPods) []Summary {
	t.Helper()
	tr, err := trace.LoadTrace(sliceNodes, slicePods)
	if err != nil {
		t.Fatal(err)
	}
	sums, err := RunAll(context.Background(), tr, &Config{Policies: DefaultPolicies, Seeds: []uint64{1, 2, 3}, Inflate: DefaultInflate, CPUPods: cpuPods, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range sums {
		sums[i].Seconds = 0
	}
	return sums
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/simulator -run %s -update)", err, t.Name())
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", path, diff)
	}
}

// TestGoldenTable checks the report, in every format, of a small slice of
// the default openb trace (every 20th node and pod), with the CPU-only
// pods placed (the default), and as a table with them left out.
func TestGoldenTable(t *testing.T) {
	sums := sliceSummaries(t, CPUPodsPlace)
	for _, f := range []Format{FormatTable, FormatJSON, FormatCSV} {
		t.Run(string(f), func(t *testing.T) {
			var b bytes.Buffer
			if err := Write(&b, f, sums); err != nil {
				t.Fatal(err)
			}
			ext := map[Format]string{FormatTable: "table.txt", FormatJSON: "json", FormatCSV: "csv"}[f]
			golden(t, "golden/openb-slice."+ext, b.Bytes())
		})
	}
	t.Run("skip", func(t *testing.T) {
		var b bytes.Buffer
		if err := Write(&b, FormatTable, sliceSummaries(t, CPUPodsSkip)); err != nil {
			t.Fatal(err)
		}
		golden(t, "golden/openb-slice-skip.table.txt", b.Bytes())
	})
}

// TestGoldenSampled checks the report of a replay that kube-scheduler
// samples: the slice's nodes and pods three times over (183 nodes), with
// the adaptive percentageOfNodesToScore (100 of 183 nodes per cycle).
func TestGoldenSampled(t *testing.T) {
	tr, err := trace.LoadTrace(sliceNodes, slicePods)
	if err != nil {
		t.Fatal(err)
	}
	big := &trace.Trace{}
	for k := range 3 {
		for _, n := range tr.Nodes {
			n.Name = fmt.Sprintf("%s-%d", n.Name, k)
			n.Cards = slices.Clone(n.Cards)
			big.Nodes = append(big.Nodes, n)
		}
		for _, p := range tr.Pods {
			p.Name = fmt.Sprintf("%s-%d", p.Name, k)
			big.Pods = append(big.Pods, p)
		}
	}
	sums, err := RunAll(context.Background(), big, &Config{Policies: DefaultPolicies, Seeds: []uint64{1, 2, 3}, Inflate: DefaultInflate,
		CPUPods: CPUPodsPlace, Parallel: 2, PercentageOfNodesToScore: ptr.To[int32](0)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range sums {
		sums[i].Seconds = 0
	}
	var b bytes.Buffer
	if err := Write(&b, FormatTable, sums); err != nil {
		t.Fatal(err)
	}
	golden(t, "golden/openb-slice-x3-sampled.table.txt", b.Bytes())
}

// TestJSONShape checks the --format json contract: one array, one object
// per policy, keys in this order, alloc_at keyed "90".."130".
func TestJSONShape(t *testing.T) {
	sums := []Summary{{Policy: "fgd", Seeds: []uint64{42, 43}, CPUPods: CPUPodsPlace, Topology: TopologySecondScheduler, AllocAt: map[int]float64{90: 89.9, 100: 95.2, 110: 95.3, 120: 95.3, 130: 95.4}, FailedPods: 612,
		Retried: 3.25, Percentage: 0, Nodes: 1213, NodesToFind: 497, Seconds: 11.8}}
	var b bytes.Buffer
	if err := Write(&b, FormatJSON, sums); err != nil {
		t.Fatal(err)
	}
	want := `[{"policy":"fgd","seeds":[42,43],"cpu_pods":"place","topology":"second-scheduler","alloc_at":{"90":89.9,"100":95.2,"110":95.3,"120":95.3,"130":95.4},"failed_pods":612,` +
		`"retried_pods":3.3,"percentage_of_nodes_to_score":0,"nodes":1213,"nodes_to_find":497,"seconds":11.8}]` + "\n"
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("json (-want +got):\n%s", diff)
	}
}
