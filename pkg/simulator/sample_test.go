package simulator

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// nodeNames returns "n<from>" to "n<to>" (three digits), inclusive.
func nodeNames(from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("n%03d", i))
	}
	return out
}

// TestSubmitSamples places one pod on a cluster of more than 100 nodes as
// kube-scheduler would with percentageOfNodesToScore: its own filter
// (CPU, memory, total GPU memory) walks the nodes from the rotating start
// index until it has found NodesToFind of them, only those reach the
// extender (the policy), and a pod the extender rejects on the whole sample
// is tried again with the next sample until every node was examined.
func TestSubmitSamples(t *testing.T) {
	tests := []struct {
		name         string
		nodes, cards int
		// used: node index -> units used on each of its cards (of 1000).
		used map[int][]int64
		// cpuUsed: node index -> millicores requested (of 64000).
		cpuUsed    map[int]int64
		percentage int32
		start      int
		cpuPods    CPUPods
		pod        string // openb row
		// want: the nodes the pod may go to (ties); nil: it fails.
		want       []string
		wantCycles int
		wantNext   int
	}{
		{
			name:  "every node: binpack's fullest node",
			nodes: 150, cards: 1, used: map[int][]int64{140: {500}},
			percentage: 100, pod: "p,1000,1024,1,400,",
			want: []string{"n140"}, wantCycles: 1, wantNext: 0,
		},
		{
			name:  "adaptive: the first 100 feasible nodes from the start index, without the fullest",
			nodes: 150, cards: 1, used: map[int][]int64{140: {500}},
			percentage: 0, pod: "p,1000,1024,1,400,",
			want: nodeNames(0, 99), wantCycles: 1, wantNext: 100,
		},
		{
			name:  "the start index rotates, the sample wraps around",
			nodes: 150, cards: 1, used: map[int][]int64{140: {500}, 5: {550}, 50: {590}},
			percentage: 0, start: 60, pod: "p,1000,1024,1,400,",
			want: []string{"n005"}, wantCycles: 1, wantNext: 10,
		},
		{
			name:  "nodes the scheduler's own filter rejects are examined, not sampled",
			nodes: 150, cards: 1, used: map[int][]int64{105: {500}, 130: {600}},
			cpuUsed:    map[int]int64{0: 64000, 1: 64000, 2: 64000, 3: 64000, 4: 64000, 5: 64000, 6: 64000, 7: 64000, 8: 64000, 9: 64000},
			percentage: 0, pod: "p,1000,1024,1,400,",
			want: []string{"n105"}, wantCycles: 1, wantNext: 110,
		},
		{
			name:  "the sample has the memory in total but on no one card: another cycle, the next sample",
			nodes: 150, cards: 2, used: fill(0, 99, 600, 600),
			percentage: 0, pod: "p,1000,1024,1,700,",
			want: nodeNames(100, 149), wantCycles: 2, wantNext: 50,
		},
		{
			name:  "every node: no second cycle",
			nodes: 150, cards: 2, used: fill(0, 99, 600, 600),
			percentage: 100, pod: "p,1000,1024,1,700,",
			want: nodeNames(100, 149), wantCycles: 1, wantNext: 0,
		},
		{
			name:  "no card fits anywhere: failed once every node was examined",
			nodes: 150, cards: 2, used: fill(0, 149, 600, 600),
			percentage: 0, pod: "p,1000,1024,1,700,",
			want: nil, wantCycles: 2, wantNext: 50,
		},
		{
			name:  "no node passes the scheduler's own filter: one cycle over every node",
			nodes: 150, cards: 2, used: fill(0, 149, 600, 600),
			percentage: 0, start: 30, pod: "p,1000,1024,2,1000,",
			want: nil, wantCycles: 1, wantNext: 30,
		},
		{
			name:  "under 100 nodes there is no sampling",
			nodes: 80, cards: 1, used: map[int][]int64{70: {500}},
			percentage: 0, start: 10, pod: "p,1000,1024,1,400,",
			want: []string{"n070"}, wantCycles: 1, wantNext: 10,
		},
		{
			name:  "50% of 400 nodes",
			nodes: 400, cards: 1, used: map[int][]int64{300: {500}},
			percentage: 50, pod: "p,1000,1024,1,400,",
			want: nodeNames(0, 199), wantCycles: 1, wantNext: 200,
		},
		{
			name:  "adaptive on 400 nodes: 47%",
			nodes: 400, cards: 1, used: map[int][]int64{300: {500}},
			percentage: 0, pod: "p,1000,1024,1,400,",
			want: nodeNames(0, 187), wantCycles: 1, wantNext: 188,
		},
		{
			name:  "a CPU-only pod: kube-scheduler's scores among the sample",
			nodes: 150, cards: 1, cpuUsed: cpuFill(0, 139, 32000),
			percentage: 0, cpuPods: CPUPodsPlace, pod: "c,1000,1024,0,0,",
			want: nodeNames(0, 99), wantCycles: 1, wantNext: 100,
		},
		{
			name:  "a CPU-only pod, every node: the emptiest",
			nodes: 150, cards: 1, cpuUsed: cpuFill(0, 139, 32000),
			percentage: 100, cpuPods: CPUPodsPlace, pod: "c,1000,1024,0,0,",
			want: nodeNames(140, 149), wantCycles: 1, wantNext: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var nodes strings.Builder
			for i := range tc.nodes {
				fmt.Fprintf(&nodes, "n%03d,64000,262144,%d,T4\n", i, tc.cards)
			}
			tr := tinyTrace(t, nodes.String(), tc.pod+"\n")
			cpuPods := tc.cpuPods
			if cpuPods == "" {
				cpuPods = CPUPodsSkip
			}
			r, err := newReplay(tr, Options{Policy: allocator.NameBinpack, Seed: 1, CPUPods: cpuPods, PercentageOfNodesToScore: ptr.To(tc.percentage)})
			if err != nil {
				t.Fatal(err)
			}
			for i, used := range tc.used {
				ns := &r.nodes[i]
				r.holes.AddNode(&ns.alloc, -1)
				for c, u := range used {
					ns.alloc.Cards[c].Used = u
				}
				r.holes.AddNode(&ns.alloc, 1)
			}
			for i, cpu := range tc.cpuUsed {
				r.nodes[i].take(&trace.Pod{MilliCPU: cpu})
			}
			r.sched.next = tc.start
			d := r.submit(&tr.Pods[0])
			switch {
			case tc.want == nil && d.Node != "":
				t.Errorf("placed on %s, want failed", d.Node)
			case tc.want != nil && !slices.Contains(tc.want, d.Node):
				t.Errorf("placed on %q, want one of %s", d.Node, short(tc.want))
			}
			if diff := cmp.Diff([2]int{tc.wantCycles, tc.wantNext}, [2]int{d.Cycles, r.sched.next}); diff != "" {
				t.Errorf("[cycles, next start index] (-want +got):\n%s", diff)
			}
		})
	}
}

// fill returns nodes from..to (inclusive) with cards used as given.
func fill(from, to int, used ...int64) map[int][]int64 {
	m := map[int][]int64{}
	for i := from; i <= to; i++ {
		m[i] = used
	}
	return m
}

// cpuFill returns nodes from..to (inclusive) with milliCPU requested.
func cpuFill(from, to int, milliCPU int64) map[int]int64 {
	m := map[int]int64{}
	for i := from; i <= to; i++ {
		m[i] = milliCPU
	}
	return m
}

// short lists names, or the first and the last of more than three.
func short(names []string) string {
	if len(names) > 3 {
		return fmt.Sprintf("%s..%s (%d nodes)", names[0], names[len(names)-1], len(names))
	}
	return strings.Join(names, ", ")
}

// TestRunRetriesSampledOutPods: 150 nodes of two cards, identical pods of
// 600 units: every card takes one. Late in the replay, nodes with both
// cards taken still have 800 units free in total and pass kube-scheduler's
// own filter, so whole samples may hold no card the pod fits: sampled, such
// pods take more cycles, but as each is tried until every node was
// examined, exactly the pods that fit nowhere fail, as without sampling.
func TestRunRetriesSampledOutPods(t *testing.T) {
	var nodes, pods strings.Builder
	for i := range 150 {
		fmt.Fprintf(&nodes, "n%03d,64000,262144,2,T4\n", i)
	}
	for i := range 400 {
		fmt.Fprintf(&pods, "p%03d,1000,1024,1,600,\n", i)
	}
	tr := tinyTrace(t, nodes.String(), pods.String())
	run := func(percentage int32) *Result {
		res, err := Run(context.Background(), tr, Options{Policy: allocator.NameBinpack, Seed: 7, Record: true, PercentageOfNodesToScore: ptr.To(percentage)})
		if err != nil {
			t.Fatal(err)
		}
		retried, extra := 0, 0
		for _, d := range res.Decisions {
			if d.Cycles > 1 {
				retried++
				extra += d.Cycles - 1
			}
		}
		if retried != res.Retried || extra != res.ExtraCycles {
			t.Errorf("percentage %d: decisions show %d pods retried, %d extra cycles; the result counts %d and %d", percentage, retried, extra, res.Retried, res.ExtraCycles)
		}
		return res
	}
	all, sampled := run(100), run(0)
	if all.Retried != 0 {
		t.Errorf("every node: %d pods retried, want 0", all.Retried)
	}
	if sampled.Retried == 0 {
		t.Error("sampled: no pod retried; the test exercises nothing")
	}
	if all.NodesToFind != 150 || sampled.NodesToFind != 100 {
		t.Errorf("nodes to find: %d and %d, want 150 and 100", all.NodesToFind, sampled.NodesToFind)
	}
	// 300 cards, one pod each.
	if diff := cmp.Diff([2]int{all.Pods - 300, all.Pods - 300}, [2]int{all.FailedTotal(), sampled.FailedTotal()}); diff != "" {
		t.Errorf("failed pods [every node, sampled] (-want +got):\n%s", diff)
	}
}

// TestSchedulerOrder: kube-scheduler's node tree lists nodes by name
// within a zone, the zones in the order their first node (by name)
// appears, one node of each zone in turn.
func TestSchedulerOrder(t *testing.T) {
	z1 := trace.ZoneKey(map[string]string{"topology.kubernetes.io/region": "r", "topology.kubernetes.io/zone": "z1"})
	z2 := trace.ZoneKey(map[string]string{"topology.kubernetes.io/zone": "z2"})
	nodes := []trace.Node{{Name: "b", Zone: z1}, {Name: "a", Zone: z2}, {Name: "c", Zone: z1}, {Name: "d"}, {Name: "e", Zone: z2}, {Name: "f", Zone: z1}}
	var got []string
	for _, i := range schedulerOrder(nodes) {
		got = append(got, nodes[i].Name)
	}
	if diff := cmp.Diff([]string{"a", "b", "d", "e", "c", "f"}, got); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}
