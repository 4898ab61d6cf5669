package simulator

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"time"

	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/allocator"
)

// DefaultInflate is the study's arrival target: clones are appended until
// the pods' GPU demand first passes 130% of the cluster's GPU capacity.
const DefaultInflate = 1.3

// Marks are the arrival levels, in percent of GPU capacity, that reports show.
var Marks = []int{90, 100, 110, 120, 130}

// CPUPods says what happens to pods that ask no GPU memory.
type CPUPods string

const (
	// CPUPodsSkip leaves them out of the replay: the extender does not
	// place them, and the figures then measure GPU placement alone. The
	// default.
	CPUPodsSkip CPUPods = "skip"
	// CPUPodsSpread places them by CPU and memory alone, on the node left
	// with the largest free share of both (kube-scheduler's default
	// LeastAllocated scoring), whatever the GPU policy.
	CPUPodsSpread CPUPods = "spread"
)

// Options configure one replay.
type Options struct {
	// Policy names an allocator policy (allocator.PolicyNames).
	Policy string
	// Seed drives the shuffle, the clones, the tie-breaks and Random.
	Seed uint64
	// Inflate is the arrival target as a share of GPU capacity
	// (DefaultInflate when 0).
	Inflate float64
	// CPUPods: CPUPodsSkip when empty.
	CPUPods CPUPods
	// GPUOnly scores from GPU memory alone, as the extender does for nodes
	// that report no CPU (an ablation: what weighing CPU is worth):
	// policies that can also weigh CPU (allocator.HostScorer) are not
	// given a Host. CPU and memory must still fit.
	GPUOnly bool
	// Record keeps every decision in Result.Decisions.
	Record bool
	// PercentageOfNodesToScore is the kube-scheduler setting the replay
	// follows, 0 to 100 (0: kube-scheduler's adaptive default; see
	// NodesToFind); nil for DefaultPercentageOfNodesToScore, what we ship.
	PercentageOfNodesToScore *int32
}

// Decision is where one pod went.
type Decision struct {
	Pod string
	// Node is "" for a pod that fit nowhere (or a skipped CPU-only pod).
	Node string
	// Cards holds, per container of the pod's Demand, the card indexes.
	Cards [][]int
	// Candidates is the number of nodes where the pod fit.
	Candidates int
	// Cycles is the number of scheduling cycles the pod took: more than 1
	// when the extender found no card for it on a whole sample of nodes
	// (see Result.Retried).
	Cycles int
}

// Result is one replay's outcome.
type Result struct {
	Policy string
	Seed   uint64
	// Pods submitted, clones included; Capacity in units.
	Pods     int
	Capacity int64
	// AllocSum and AllocCount: index X = arrival rounding to X% of
	// capacity; sum and count of the allocated share (percent) after each
	// pod submitted at that arrival. They end at the last arrival reached.
	// See AllocAt.
	AllocSum   []float64
	AllocCount []int
	// Failed counts the pods that fit nowhere, by kind.
	Failed map[Kind]int
	// Skipped counts the CPU-only pods left out (CPUPodsSkip).
	Skipped int
	// FragAt: mark of Marks -> fragmentation in percent of capacity once
	// arrival first reaches it (see Fragmentation).
	FragAt map[int]float64
	// Percentage is the percentageOfNodesToScore replayed; NodesToFind
	// how many of the Nodes kube-scheduler samples for it (all of them
	// when 100).
	Percentage         int32
	Nodes, NodesToFind int
	// Retried counts the GPU pods that took more than one scheduling
	// cycle because the extender rejected every node of a sample, and
	// ExtraCycles the cycles beyond the first they took.
	Retried, ExtraCycles int
	// Seconds of wall time the replay took.
	Seconds float64
	// Decisions, in submission order, when Options.Record.
	Decisions []Decision
}

// AllocAt returns the mean allocated share of GPU capacity, in percent,
// over the pods submitted while the arrived demand (failed pods included)
// rounded to x% of capacity; if no pod was submitted at x% exactly (a large
// pod jumped over it), the last share before it; NaN when arrival never
// reached x%.
func (r *Result) AllocAt(x int) float64 {
	if x < 0 || x >= len(r.AllocCount) {
		return math.NaN()
	}
	for i := x; i >= 0; i-- {
		if r.AllocCount[i] > 0 {
			return r.AllocSum[i] / float64(r.AllocCount[i])
		}
	}
	return 0
}

// FailedTotal returns the number of failed pods.
func (r *Result) FailedTotal() int {
	var n int
	for _, v := range r.Failed {
		n += v
	}
	return n
}

// nodeState is a node during a replay.
type nodeState struct {
	spec *Node
	// alloc holds the cards with their Used units, as the extender's cache
	// would hold them.
	alloc allocator.Node
	// cpuFree and memFree: millicores and MiB not yet requested.
	cpuFree, memFree int64
}

// replay is one run's state.
type replay struct {
	opts  Options
	nodes []nodeState
	// tasks is FGD's target workload, from the whole trace.
	tasks []allocator.Task
	// work learns the typical requests for fragaware, as the extender's
	// cache does, from the GPU pods submitted so far.
	work   *allocator.Workload
	tieRNG *rand.Rand
	// policy is fixed for all pods; nil for fragaware, rebuilt per pod.
	policy allocator.Policy
	// cur and best are reused placements.
	cur, best *allocator.Placement
	// maxCPU and maxGPU: the largest node's CPU (millicores) and GPU
	// memory (units).
	maxCPU, maxGPU int64
	// capacity, arrived and placed GPU memory, in units.
	capacity, arrived, placed int64
	// holes summarises the cards for fragaware, as the extender's cache
	// does.
	holes *allocator.Holes
	// sched samples the nodes as kube-scheduler does.
	sched sampler
}

// Run replays tr with the study's methodology (see the package doc).
func Run(ctx context.Context, tr *Trace, opts Options) (*Result, error) {
	start := time.Now()
	if err := tr.Validate(); err != nil {
		return nil, err
	}
	if !slices.Contains(allocator.PolicyNames(), opts.Policy) {
		_, err := allocator.New(opts.Policy, nil, nil)
		return nil, err
	}
	if opts.Inflate == 0 {
		opts.Inflate = DefaultInflate
	}
	switch opts.CPUPods {
	case "":
		opts.CPUPods = CPUPodsSkip
	case CPUPodsSkip, CPUPodsSpread:
	default:
		return nil, fmt.Errorf("unknown CPU-only pod handling %q; want %q or %q", opts.CPUPods, CPUPodsSkip, CPUPodsSpread)
	}
	if opts.PercentageOfNodesToScore == nil {
		opts.PercentageOfNodesToScore = ptr.To(DefaultPercentageOfNodesToScore)
	}
	if p := *opts.PercentageOfNodesToScore; p < 0 || p > 100 {
		return nil, fmt.Errorf("percentageOfNodesToScore %d: want 0 (kube-scheduler's adaptive default) to 100", p)
	}
	order, err := Arrivals(tr, opts.Seed, opts.Inflate)
	if err != nil {
		return nil, err
	}
	r, err := newReplay(tr, opts)
	if err != nil {
		return nil, err
	}

	res := &Result{Policy: opts.Policy, Seed: opts.Seed, Pods: len(order), Capacity: r.capacity,
		Failed: map[Kind]int{}, FragAt: map[int]float64{},
		Percentage: *opts.PercentageOfNodesToScore, Nodes: len(r.nodes), NodesToFind: r.sched.toFind}
	mark := 0
	for k, idx := range order {
		if k%256 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		pod := &tr.Pods[idx]
		if pod.Demand == nil && opts.CPUPods == CPUPodsSkip {
			res.Skipped++
			continue
		}
		d := r.submit(pod)
		if d.Node == "" {
			res.Failed[pod.Kind]++
		}
		if d.Cycles > 1 {
			res.Retried++
			res.ExtraCycles += d.Cycles - 1
		}
		if opts.Record {
			d.Pod = pod.Name
			if k >= len(tr.Pods) {
				d.Pod += "-clone-" + strconv.Itoa(k-len(tr.Pods))
			}
			res.Decisions = append(res.Decisions, d)
		}
		arrivedPct := 100 * float64(r.arrived) / float64(r.capacity)
		b := int(math.Round(arrivedPct))
		for b >= len(res.AllocSum) {
			res.AllocSum, res.AllocCount = append(res.AllocSum, 0), append(res.AllocCount, 0)
		}
		res.AllocSum[b] += 100 * float64(r.placed) / float64(r.capacity)
		res.AllocCount[b]++
		for mark < len(Marks) && arrivedPct >= float64(Marks[mark]) {
			res.FragAt[Marks[mark]] = 100 * r.fragmentation() / float64(r.capacity)
			mark++
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// newReplay returns the state of a replay of tr before the first pod;
// opts are checked and completed by Run.
func newReplay(tr *Trace, opts Options) (*replay, error) {
	percentage := DefaultPercentageOfNodesToScore
	if opts.PercentageOfNodesToScore != nil {
		percentage = *opts.PercentageOfNodesToScore
	}
	r := &replay{opts: opts, capacity: tr.Capacity(), work: allocator.NewWorkload(),
		tieRNG: rand.New(rand.NewPCG(opts.Seed, 2)), tasks: TargetTasks(tr.Pods),
		cur: &allocator.Placement{}, best: &allocator.Placement{}, holes: allocator.NewHoles(),
		sched: newSampler(tr.Nodes, percentage)}
	switch opts.Policy {
	case allocator.NameFragAware:
		// Rebuilt per pod from what it has seen, as the extender does.
	case allocator.NameFGD:
		r.policy = allocator.NewFGD(r.tasks)
	case allocator.NameRandom:
		r.policy = allocator.NewRandom(rand.New(rand.NewPCG(opts.Seed, 3)))
	default:
		var err error
		if r.policy, err = allocator.New(opts.Policy, nil, nil); err != nil {
			return nil, err
		}
	}
	r.nodes = make([]nodeState, len(tr.Nodes))
	for i := range tr.Nodes {
		n := &tr.Nodes[i]
		r.nodes[i] = nodeState{spec: n, cpuFree: n.MilliCPU, memFree: n.MemoryMiB,
			alloc: allocator.Node{Name: n.Name, Unit: n.Unit, Cards: slices.Clone(n.Cards)}}
		r.holes.AddNode(&r.nodes[i].alloc, 1)
		r.maxCPU = max(r.maxCPU, n.MilliCPU)
		r.maxGPU = max(r.maxGPU, r.nodes[i].alloc.Capacity())
	}
	return r, nil
}

// Arrivals returns the submission order of tr's pods for seed: indexes of
// tr.Pods sorted by name and shuffled, then indexes drawn uniformly (clones)
// until the GPU demand first passes inflate × capacity.
func Arrivals(tr *Trace, seed uint64, inflate float64) ([]int, error) {
	order := make([]int, len(tr.Pods))
	var total int64
	for i := range order {
		order[i] = i
		total += tr.Pods[i].Units()
	}
	if total == 0 {
		return nil, fmt.Errorf("none of the %d pods asks GPU memory", len(tr.Pods))
	}
	sort.SliceStable(order, func(a, b int) bool { return tr.Pods[order[a]].Name < tr.Pods[order[b]].Name })
	rng := rand.New(rand.NewPCG(seed, 1))
	rng.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
	target := inflate * float64(tr.Capacity())
	for float64(total) <= target {
		i := rng.IntN(len(tr.Pods))
		order = append(order, i)
		total += tr.Pods[i].Units()
	}
	return order, nil
}

// submit places pod as kube-scheduler and the extender would, or fails it,
// and returns the decision. Each scheduling cycle samples the nodes (see
// sampler): those whose CPU, memory and total GPU memory fit, as
// kube-scheduler's own filters see them; the policy then chooses among
// them (the extender's filter with --filter-best). When no card fits the
// pod on any node of the sample, kube-scheduler finds the pod
// unschedulable and tries it again later with the next sample;
// here it is tried again at once, before the next pod arrives, until it is
// placed or every node was examined. (kube-scheduler waits at least 1 s,
// its initial backoff, while other pods may take the room; the replay
// does not model time.)
func (r *replay) submit(pod *Pod) Decision {
	if pod.Demand == nil {
		return r.submitCPU(pod)
	}
	r.arrived += pod.Units()
	policy := r.policy
	if policy == nil { // fragaware: what the extender's cache would build
		r.work.ObservePod(pod.Demand, pod.MilliCPU, pod.MemoryMiB)
		policy = allocator.NewFragAware(r.work.Typical(), r.holes)
	}
	schedulerFits := func(i int) bool {
		ns := &r.nodes[i]
		return ns.admits(pod) && ns.alloc.FreeTotal() >= pod.Units()
	}
	var d Decision
	for examined := 0; examined < len(r.nodes); {
		d.Cycles++
		sample, n := r.sched.cycle(schedulerFits)
		examined += n
		best := r.choose(pod, policy, sample, &d)
		if best >= 0 {
			r.place(pod, best, &d)
			return d
		}
	}
	return d
}

// choose returns the node of sample (indexes of r.nodes) that policy rates
// highest where the pod's cards fit, its placement in r.best, or -1; it
// sets d.Candidates.
func (r *replay) choose(pod *Pod, policy allocator.Policy, sample []int, d *Decision) int {
	hs, hostAware := policy.(allocator.HostScorer)
	hostAware = hostAware && !r.opts.GPUOnly
	host := allocator.Host{PodMilliCPU: pod.MilliCPU, PodMemoryMiB: pod.MemoryMiB, MaxMilliCPU: r.maxCPU, MaxUnits: r.maxGPU}

	best, ties, candidates := -1, 0, 0
	var bestScore float64
	for _, i := range sample {
		ns := &r.nodes[i]
		if !mayFit(&ns.alloc, pod) {
			continue
		}
		if err := allocator.FitWith(&ns.alloc, pod.Demand, pod.Constraints, policy, r.cur); err != nil {
			continue
		}
		candidates++
		var s float64
		if hostAware {
			host.FreeMilliCPU, host.FreeMemoryMiB = ns.cpuFree, ns.memFree
			s = hs.NodeScoreHost(&ns.alloc, r.cur, &host)
		} else {
			s = policy.NodeScore(&ns.alloc, r.cur)
		}
		switch {
		case best < 0 || s > bestScore:
			best, bestScore, ties = i, s, 1
			r.cur, r.best = r.best, r.cur
		case s == bestScore:
			// Reservoir sampling: each tied node is equally likely.
			ties++
			if r.tieRNG.IntN(ties) == 0 {
				best = i
				r.cur, r.best = r.best, r.cur
			}
		}
	}
	d.Candidates = candidates
	return best
}

// place holds r.best's cards on node best for pod and records it in d.
func (r *replay) place(pod *Pod, best int, d *Decision) {
	ns := &r.nodes[best]
	r.holes.AddNode(&ns.alloc, -1)
	for i, u := range r.best.Reserved {
		ns.alloc.Cards[i].Used += u
	}
	r.holes.AddNode(&ns.alloc, 1)
	ns.cpuFree -= pod.MilliCPU
	ns.memFree -= pod.MemoryMiB
	r.placed += r.best.Total()
	d.Node = ns.spec.Name
	d.Cards = make([][]int, len(r.best.Cards))
	for c, poss := range r.best.Cards {
		for _, pos := range poss {
			d.Cards[c] = append(d.Cards[c], ns.alloc.Cards[pos].Index)
		}
	}
}

// submitCPU places a pod that asks no GPU memory as kube-scheduler's
// default NodeResourcesFit scoring (LeastAllocated) would: on the node of
// its sample left with the largest free share of CPU and memory, summed.
// The extender does not see such a pod, so one cycle decides.
func (r *replay) submitCPU(pod *Pod) Decision {
	sample, _ := r.sched.cycle(func(i int) bool { return r.nodes[i].admits(pod) })
	best, ties := -1, 0
	var bestScore float64
	for _, i := range sample {
		ns := &r.nodes[i]
		s := share(ns.cpuFree-pod.MilliCPU, ns.spec.MilliCPU) + share(ns.memFree-pod.MemoryMiB, ns.spec.MemoryMiB)
		switch {
		case best < 0 || s > bestScore:
			best, bestScore, ties = i, s, 1
		case s == bestScore:
			ties++
			if r.tieRNG.IntN(ties) == 0 {
				best = i
			}
		}
	}
	if best < 0 {
		return Decision{Cycles: 1}
	}
	r.nodes[best].cpuFree -= pod.MilliCPU
	r.nodes[best].memFree -= pod.MemoryMiB
	return Decision{Node: r.nodes[best].spec.Name, Cycles: 1}
}

func share(free, total int64) float64 {
	if total <= 0 {
		return 0
	}
	return float64(free) / float64(total)
}

// admits is NodeResourcesFit for CPU and memory. Which cards the pod may
// use (gpu_spec, card annotations) is the extender's decision, made in
// choose as the extender's filter makes it: kube-scheduler knows nothing of
// it, so a node of other cards still counts in its sample.
func (ns *nodeState) admits(pod *Pod) bool {
	return ns.cpuFree >= pod.MilliCPU && ns.memFree >= pod.MemoryMiB
}

// mayFit is a quick necessary condition for allocator.Fit: every container
// finds enough cards with its units free. It only spares Fit the work of
// explaining why a pod does not fit.
func mayFit(n *allocator.Node, pod *Pod) bool {
	for _, c := range pod.Demand {
		fits := 0
		for i := range n.Cards {
			if n.Cards[i].Free() >= c.Units {
				fits++
			}
		}
		if fits < c.Cards {
			return false
		}
	}
	return true
}

// fragmentation is the cluster's FGD fragmentation for the trace's target
// workload, in units (see allocator.FGD).
func (r *replay) fragmentation() float64 {
	fgd := allocator.NewFGD(r.tasks)
	var frag float64
	var frees []int64
	for i := range r.nodes {
		ns := &r.nodes[i]
		frees = frees[:0]
		for j := range ns.alloc.Cards {
			frees = append(frees, ns.alloc.Cards[j].Free())
		}
		frag += fgd.Fragmentation(frees, ns.spec.Model, ns.cpuFree)
	}
	return frag
}
