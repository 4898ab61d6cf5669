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
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
	"github.com/gpushare/gpushare/pkg/workload"
)

// DefaultInflate is the study's arrival target: clones are appended until
// the pods' GPU demand first passes 130% of the cluster's GPU capacity.
const DefaultInflate = 1.3

// Marks are the arrival levels, in percent of GPU capacity, that reports show.
var Marks = []int{90, 100, 110, 120, 130}

// CPUPods says what happens to pods that ask no GPU memory.
type CPUPods string

const (
	// CPUPodsPlace, the default, places them as the replayed configuration
	// does (see Scheduler): by kube-scheduler's own scores, and the
	// extender's when an extender entry prioritizes them. They take the CPU
	// and memory of the GPU nodes, as in a real cluster.
	CPUPodsPlace CPUPods = "place"
	// CPUPodsSkip leaves them out of the replay, so that the figures
	// measure GPU placement alone.
	CPUPodsSkip CPUPods = "skip"
)

// Options configure one replay.
type Options struct {
	// Policy names an allocator policy (allocator.PolicyNames).
	Policy string
	// Seed drives the shuffle, the clones, the tie-breaks and Random.
	Seed uint64
	// Inflate is the arrival target as a share of GPU capacity;
	// DefaultInflate when 0.
	Inflate float64
	// CPUPods: CPUPodsPlace when empty.
	CPUPods CPUPods
	// GPUOnly scores from GPU memory alone, as the extender does for nodes
	// that report no CPU. It is an ablation: what weighing CPU is worth.
	// Policies that can also weigh CPU (allocator.HostScorer) are not given a
	// Host, and the extender rates every node alike for CPU-only pods. CPU and
	// memory must still fit.
	GPUOnly bool
	// Record keeps every decision in Result.Decisions.
	Record bool
	// Scheduler is the kube-scheduler configuration the replay follows for
	// the pods that ask GPU memory; nil for ShippedScheduler, what we ship.
	// Topology says which kube-scheduler places the others (ForTopology); ""
	// is TopologyExtender.
	Scheduler *Scheduler
	Topology  Topology
	// IdleTaintMinCards is the device plugin's --idle-taint-min-cards. A node
	// of at least that many cards, none holding GPU memory, carries
	// gpushare.io/idle-gpus (PreferNoSchedule). kube-scheduler's
	// TaintToleration weighs it (Scheduler.TaintWeight) for every pod. 0
	// taints no node. nil is gpushare.DefaultIdleTaintMinCards, what the plugin
	// does by default, or 0 in a DRA replay, as the driver's nodes run no
	// device plugin.
	IdleTaintMinCards *int
	// PercentageOfNodesToScore, when not nil, replaces the Scheduler's: 0 to
	// 100, where 0 is kube-scheduler's adaptive default (see NodesToFind).
	PercentageOfNodesToScore *int32
	// DRA, when not nil, replays the GPU pods as DRA claims (see DRA).
	DRA *DRA
}

// Decision is where one pod went.
type Decision struct {
	Pod string
	// Node is "" for a pod that fit nowhere, or a skipped CPU-only pod.
	Node string
	// Cards holds, per container of the pod's Demand, the card indexes,
	// ascending.
	Cards [][]int
	// Candidates is the number of nodes where the pod fit.
	Candidates int
	// Cycles is the number of scheduling cycles the pod took. It is more than
	// 1 when the extender found no card for it on a whole sample of nodes (see
	// Result.Retried).
	Cycles int
}

// Result is one replay's outcome.
type Result struct {
	Policy string
	Seed   uint64
	// Pods submitted, clones included. Capacity in units.
	Pods     int
	Capacity int64
	// AllocSum and AllocCount are indexed by X, an arrival that rounds to X%
	// of capacity. They hold the sum and count of the allocated share
	// (percent) after each pod submitted at that arrival, and end at the last
	// arrival reached. See AllocAt.
	AllocSum   []float64
	AllocCount []int
	// Failed counts the pods that fit nowhere, by kind.
	Failed map[trace.Kind]int
	// CPUPods is how the pods that ask no GPU memory were handled. CPUOnly
	// counts them, and Skipped those left out (CPUPodsSkip). Topology is the
	// topology replayed.
	CPUPods          CPUPods
	Topology         Topology
	CPUOnly, Skipped int
	// FragAt: mark of Marks -> fragmentation in percent of capacity once
	// arrival first reaches it (see Fragmentation).
	FragAt map[int]float64
	// Percentage is the percentageOfNodesToScore replayed. NodesToFind is how
	// many of the Nodes kube-scheduler samples for it, all of them at 100.
	Percentage         int32
	Nodes, NodesToFind int
	// Retried counts the GPU pods that took more than one scheduling cycle,
	// because the extender rejected every node of a sample. ExtraCycles counts
	// the cycles beyond the first they took.
	Retried, ExtraCycles int
	// Seconds of wall time the replay took.
	Seconds float64
	// Decisions, in submission order, when Options.Record.
	Decisions []Decision
}

// AllocAt returns the mean allocated share of GPU capacity, in percent,
// over the pods submitted while the arrived demand (failed pods included)
// rounded to x% of capacity. If no pod was submitted at x% exactly, as a
// large pod jumped over it, it returns the last share before it. It
// returns NaN when arrival never reached x%.
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
	spec *trace.Node
	// alloc holds the cards with their Used units, as the extender's cache
	// would hold them.
	alloc allocator.Node
	// cpuFree and memFree: the millicores and MiB not yet requested.
	cpuFree, memFree int64
	// kube is the node as kube-scheduler's scores see it.
	kube kubeUsage
}

// replay is one run's state.
type replay struct {
	opts  Options
	nodes []nodeState
	// tasks is FGD's target workload, from the whole trace.
	tasks []allocator.Task
	// work learns the typical requests for fragaware, as the extender's
	// cache does, from the GPU pods submitted so far.
	work   *workload.Workload
	tieRNG *rand.Rand
	// policy is fixed for all pods; nil for fragaware, which is rebuilt per
	// pod.
	policy allocator.Policy
	// cur and best are reused placements.
	cur, best *allocator.Placement
	// maxCPU and maxGPU: the largest node's CPU (millicores) and GPU
	// memory (units).
	maxCPU, maxGPU int64
	// capacity, arrived and placed: GPU memory, in units.
	capacity, arrived, placed int64
	// holes summarises the cards for fragaware, as the extender's cache
	// does.
	holes *allocator.Holes
	// sched samples the nodes as kube-scheduler does, and scheduler is the
	// configuration replayed. cpuSched and cpuScheduler are those that place
	// the pods asking no GPU memory: the same, or the cluster's own
	// kube-scheduler's (Scheduler.CPU).
	sched        sampler
	scheduler    *Scheduler
	cpuSched     *sampler
	cpuScheduler *Scheduler
	// idleMin is Options.IdleTaintMinCards (see idleTainted).
	idleMin int
	// fit, raw, passed and prio are what decide found in the last scheduling
	// cycle:
	//   - fit: the nodes of the sample where the pod fits;
	//   - raw: the policy's score there (GPU pods);
	//   - passed: the nodes the extender's filter passes (GPU pods; for
	//     CPU-only pods all of fit);
	//   - prio: their prioritize scores, nil when none.
	//
	// ties is reused by ties. The next pod reuses them all.
	fit, passed, tied []int
	raw               []float64
	prio              []int64
}

// Run replays tr with the study's methodology (see the package doc).
func Run(ctx context.Context, tr *trace.Trace, opts Options) (*Result, error) {
	start := time.Now()
	if err := tr.Validate(); err != nil {
		return nil, err
	}
	label := opts.Policy
	if err := opts.complete(); err != nil {
		return nil, err
	}
	order, err := Arrivals(tr, opts.Seed, opts.Inflate)
	if err != nil {
		return nil, err
	}
	r, err := newReplay(tr, opts)
	if err != nil {
		return nil, err
	}

	res := &Result{Policy: label, Seed: opts.Seed, Pods: len(order), Capacity: r.capacity,
		Failed: map[trace.Kind]int{}, FragAt: map[int]float64{}, CPUPods: opts.CPUPods, Topology: opts.Topology,
		Percentage: *opts.PercentageOfNodesToScore, Nodes: len(r.nodes), NodesToFind: r.sched.toFind}
	mark := 0
	for k, idx := range order {
		if k%256 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		pod := &tr.Pods[idx]
		if pod.Demand == nil {
			res.CPUOnly++
			if opts.CPUPods == CPUPodsSkip {
				res.Skipped++
				continue
			}
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

// complete checks opts and fills in the defaults Options documents.
func (opts *Options) complete() error {
	if err := opts.splitDRA(); err != nil {
		return err
	}
	if !slices.Contains(allocator.PolicyNames(), opts.Policy) {
		_, err := allocator.New(opts.Policy, nil, nil)
		return err
	}
	if opts.Inflate == 0 {
		opts.Inflate = DefaultInflate
	}
	switch opts.CPUPods {
	case "":
		opts.CPUPods = CPUPodsPlace
	case CPUPodsSkip, CPUPodsPlace:
	default:
		return fmt.Errorf("unknown CPU-only pod handling %q; want %q or %q", opts.CPUPods, CPUPodsPlace, CPUPodsSkip)
	}
	if opts.Topology == "" {
		opts.Topology = TopologyExtender
	}
	var err error
	if opts.Scheduler, err = ForTopology(opts.Topology, opts.Scheduler); err != nil {
		return err
	}
	if opts.PercentageOfNodesToScore == nil {
		opts.PercentageOfNodesToScore = ptr.To(opts.Scheduler.PercentageOfNodesToScore)
	}
	if opts.IdleTaintMinCards == nil {
		opts.IdleTaintMinCards = ptr.To(gpushare.DefaultIdleTaintMinCards)
		if opts.DRA != nil {
			// The DRA driver's nodes run no device plugin, so nothing
			// taints them idle.
			opts.IdleTaintMinCards = ptr.To(0)
		}
	}
	if p := *opts.PercentageOfNodesToScore; p < 0 || p > 100 {
		return fmt.Errorf("percentageOfNodesToScore %d: want 0 (kube-scheduler's adaptive default) to 100", p)
	}
	if *opts.IdleTaintMinCards < 0 {
		return fmt.Errorf("idle taint's minimum of cards %d: want 0 (no taint) or more", *opts.IdleTaintMinCards)
	}
	return nil
}

// newReplay returns the state of a replay of tr before the first pod. Run,
// and NewStepper, check and complete opts.
func newReplay(tr *trace.Trace, opts Options) (*replay, error) {
	sched := opts.Scheduler
	if sched == nil {
		sched = &ShippedScheduler
	}
	percentage := sched.PercentageOfNodesToScore
	if opts.PercentageOfNodesToScore != nil {
		percentage = *opts.PercentageOfNodesToScore
	}
	r := &replay{opts: opts, capacity: tr.Capacity(), work: workload.New(),
		tieRNG: rand.New(rand.NewPCG(opts.Seed, 2)), tasks: TargetTasks(tr.Pods),
		cur: &allocator.Placement{}, best: &allocator.Placement{}, holes: allocator.NewHoles(),
		sched: newSampler(tr.Nodes, percentage), scheduler: sched}
	r.cpuSched, r.cpuScheduler = &r.sched, sched
	r.idleMin = gpushare.DefaultIdleTaintMinCards
	if opts.IdleTaintMinCards != nil {
		r.idleMin = *opts.IdleTaintMinCards
	}
	if sched.CPU != nil {
		cs := newSampler(tr.Nodes, sched.CPU.PercentageOfNodesToScore)
		r.cpuSched, r.cpuScheduler = &cs, sched.CPU
	}
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
		ns := &r.nodes[i]
		*ns = nodeState{spec: n, cpuFree: n.MilliCPU, memFree: n.MemoryMiB,
			alloc: allocator.Node{Name: n.Name, Unit: n.Unit, Cards: slices.Clone(n.Cards)}}
		ns.kube = kubeUsage{allocCPU: n.MilliCPU, allocMem: n.MemoryMiB, allocGPU: ns.alloc.Capacity()}
		r.holes.AddNode(&ns.alloc, 1)
		if r.hostCounted(ns) {
			r.holes.AddHost(ns.cpuFree, 1)
		}
		r.maxCPU = max(r.maxCPU, n.MilliCPU)
		r.maxGPU = max(r.maxGPU, ns.alloc.Capacity())
	}
	return r, nil
}

// Arrivals returns the submission order of tr's pods for seed, as indexes
// of tr.Pods. They are sorted by name and shuffled, then indexes drawn
// uniformly (clones) follow, until the GPU demand first passes inflate ×
// capacity.
func Arrivals(tr *trace.Trace, seed uint64, inflate float64) ([]int, error) {
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
// and returns the decision. decide finds the nodes kube-scheduler rates
// best, and one of them is drawn uniformly, as kube-scheduler's selectHost
// does.
func (r *replay) submit(pod *trace.Pod) Decision {
	policy := r.withDRA(r.observe(pod))
	ties, d := r.decide(pod, policy)
	if len(ties) == 0 {
		return d
	}
	best := ties[0]
	if len(ties) > 1 {
		best = ties[r.tieRNG.IntN(len(ties))]
	}
	r.place(pod, policy, best, &d)
	return d
}

// observe counts pod's GPU memory as arrived, and returns the policy that
// rates nodes for it. For fragaware it is built from the typical requests
// of the pods placed so far. The extender's cache learns them the same
// way, from the pods it binds or sees bound, never from pending ones.
// place learns pod's own shape once it lands.
func (r *replay) observe(pod *trace.Pod) allocator.Policy {
	if pod.Demand != nil {
		r.arrived += pod.Units()
	}
	if r.policy != nil {
		return r.policy
	}
	f := allocator.NewFragAware(r.work.Typical(), r.holes)
	f.SetCPUDemand(r.work.CPUPerUnit())
	f.SetModels(allocator.ModelCosts(r.work.Restrictions(), r.holes), gpushare.ModelRestriction(pod.Constraints, pod.NodeSelector))
	return f
}

// decide returns the nodes (indexes of r.nodes) that kube-scheduler, with
// the extender, rates highest for pod; it may take any of them. It returns
// none when the pod fits nowhere. d says how many cycles it took, and on
// how many nodes the pod fit.
//
// A pod that asks GPU memory takes scheduling cycles, each on a sample of
// the nodes (see sampler): those whose CPU, memory and total GPU memory
// fit, as kube-scheduler's own filters see them. Of those where the pod's
// cards fit, the extender's filter passes the ones its policy rates
// highest (extenderFilter). kube-scheduler then rates those by its own
// scores and the extender's prioritize (ties). When no card fits the pod
// on any node of the sample, kube-scheduler finds the pod unschedulable.
// It tries the pod again later with the next sample. Here it is tried
// again at once, before the next pod arrives, until every node was
// examined. kube-scheduler waits at least 1 s, its initial backoff, while
// other pods may take the room; the replay does not model time.
//
// A pod that asks no GPU memory takes one cycle. kube-scheduler rates the
// nodes of its sample, those where its CPU and memory fit, by its own
// scores. If an extender entry prioritizes such pods, the extender's
// scores count too (prioritizeCPU).
func (r *replay) decide(pod *trace.Pod, policy allocator.Policy) ([]int, Decision) {
	var d Decision
	if pod.Demand == nil {
		d.Cycles = 1
		sample, _ := r.cpuSched.cycle(func(i int) bool { return r.nodes[i].admits(pod) })
		d.Candidates = len(sample)
		r.fit = append(r.fit[:0], sample...)
		r.passed, r.prio = append(r.passed[:0], sample...), nil
		if len(sample) == 0 {
			return nil, d
		}
		if r.cpuScheduler.CPUPrioritizeWeight > 0 {
			r.prio = r.prioritizeCPU(pod, policy, sample)
		}
		return r.ties(r.cpuScheduler, pod, sample, r.prio, r.cpuScheduler.CPUPrioritizeWeight), d
	}
	schedulerFits := func(i int) bool {
		ns := &r.nodes[i]
		return ns.admits(pod) && ns.alloc.FreeTotal() >= pod.Units()
	}
	for examined := 0; examined < len(r.nodes); {
		d.Cycles++
		sample, n := r.sched.cycle(schedulerFits)
		examined += n
		passed, prio := r.extenderFilter(pod, policy, sample, &d)
		if len(passed) > 0 {
			return r.ties(r.scheduler, pod, passed, prio, r.scheduler.GPUPrioritizeWeight), d
		}
	}
	return nil, d
}

// extenderFilter returns the nodes of sample (indexes of r.nodes) that the
// extender's filter passes for pod, with their prioritize scores
// (Cache.Score: 0..10 among them). Of the nodes where its cards fit, those
// are the ones policy rates highest (passBest, as Cache.FilterBest). It
// sets r.fit and d.Candidates to the nodes where the cards fit. The next
// call reuses the slices.
func (r *replay) extenderFilter(pod *trace.Pod, policy allocator.Policy, sample []int, d *Decision) (passed []int, prio []int64) {
	hs, hostAware := policy.(allocator.HostScorer)
	hostAware = hostAware && !r.opts.GPUOnly
	host := allocator.Host{PodMilliCPU: pod.MilliCPU, PodMemoryMiB: pod.MemoryMiB, MaxMilliCPU: r.maxCPU, MaxUnits: r.maxGPU}
	r.fit, r.raw = r.fit[:0], r.raw[:0]
	for _, i := range sample {
		ns := &r.nodes[i]
		if !mayFit(&ns.alloc, pod) {
			continue
		}
		if err := allocator.FitWith(&ns.alloc, pod.Demand, pod.Constraints, policy, r.cur); err != nil {
			continue
		}
		var s float64
		if hostAware {
			host.FreeMilliCPU, host.FreeMemoryMiB = ns.cpuFree, ns.memFree
			s = hs.NodeScoreHost(&ns.alloc, r.cur, &host)
		} else {
			s = policy.NodeScore(&ns.alloc, r.cur)
		}
		r.fit = append(r.fit, i)
		r.raw = append(r.raw, s)
	}
	d.Candidates = len(r.fit)
	r.passed = r.passed[:0]
	var passedRaw []float64
	for k, keep := range passBest(r.raw) {
		if keep && (len(r.passed) < allocator.MaxBestNodes || r.schedulerAlone()) {
			r.passed = append(r.passed, r.fit[k])
			passedRaw = append(passedRaw, r.raw[k])
		}
	}
	r.prio = append(r.prio[:0], allocator.NormalizeScores(passedRaw)...)
	return r.passed, r.prio
}

// passBest says which of the raw policy scores of the nodes where a pod
// fits the extender's filter passes. They are those that NormalizeScores
// maps to MaxScore (Cache.FilterBest): within a twentieth of the range of
// scores below the highest. The caller keeps the first
// allocator.MaxBestNodes of them, as FilterBest does.
func passBest(raw []float64) []bool {
	keep := make([]bool, len(raw))
	for i, v := range allocator.NormalizeScores(raw) {
		keep[i] = v == allocator.MaxScore
	}
	return keep
}

// prioritizeCPU is the extender's prioritize answer for a pod that asks no
// GPU memory, on the nodes of sample (Cache.ScoreCPU). It is MaxScore
// where the policy's CPUScorer rates the pod highest, and 0 elsewhere. It
// is MaxScore everywhere for a policy that is no CPUScorer, or with
// Options.GPUOnly. The next call reuses the slice.
func (r *replay) prioritizeCPU(pod *trace.Pod, policy allocator.Policy, sample []int) []int64 {
	cs, ok := policy.(allocator.CPUScorer)
	r.raw = r.raw[:0]
	host := allocator.Host{PodMilliCPU: pod.MilliCPU, PodMemoryMiB: pod.MemoryMiB, MaxMilliCPU: r.maxCPU, MaxUnits: r.maxGPU}
	for _, i := range sample {
		var s float64
		if ok && !r.opts.GPUOnly {
			ns := &r.nodes[i]
			host.FreeMilliCPU, host.FreeMemoryMiB = ns.cpuFree, ns.memFree
			s = cs.NodeScoreCPU(&ns.alloc, &host)
		}
		r.raw = append(r.raw, s)
	}
	r.prio = append(r.prio[:0], allocator.MarkBest(r.raw)...)
	return r.prio
}

// ties returns the nodes of candidates (indexes of r.nodes, at least one)
// that kube-scheduler rates highest for pod. With one candidate that is
// the only one. Otherwise they are those with the highest total of its own
// scores (Scheduler, TaintToleration's for the idle taint included) and
// the extender's prioritize scores. prio holds those, parallel to
// candidates, when not nil; they count times weight, scaled to
// kube-scheduler's 0..100. kube-scheduler takes one of them at random
// (selectHost). The next call reuses the slice.
func (r *replay) ties(sched *Scheduler, pod *trace.Pod, candidates []int, prio []int64, weight int64) []int {
	if len(candidates) == 1 {
		return candidates
	}
	pu := usageOf(pod)
	// TaintToleration: the count of taints the pod does not tolerate,
	// normalised over the candidates and reversed. That gives 100 for a
	// node without the idle taint, and 0 for one with it, once some
	// candidate has it. Otherwise it is 100 everywhere, which changes no
	// choice.
	tainted := false
	if sched.TaintWeight > 0 {
		for _, i := range candidates {
			tainted = tainted || r.idleTainted(i)
		}
	}
	r.tied = r.tied[:0]
	var bestScore int64
	for k, i := range candidates {
		s := sched.score(&r.nodes[i].kube, &pu)
		if tainted && !r.idleTainted(i) {
			s += sched.TaintWeight * maxNodeScore
		}
		if prio != nil {
			s += weight * prio[k] * (maxNodeScore / maxExtenderScore)
		}
		switch {
		case len(r.tied) == 0 || s > bestScore:
			r.tied, bestScore = append(r.tied[:0], i), s
		case s == bestScore:
			r.tied = append(r.tied, i)
		}
	}
	return r.tied
}

// idleTainted reports whether node i carries the device plugin's
// gpushare.io/idle-gpus taint now: it has enough cards, none holding GPU
// memory (gpushare.WantsIdleTaint).
func (r *replay) idleTainted(i int) bool {
	n := &r.nodes[i].alloc
	idle := true
	for c := range n.Cards {
		idle = idle && n.Cards[c].Used == 0
	}
	return gpushare.WantsIdleTaint(len(n.Cards), r.idleMin, idle)
}

// usageOf is what pod adds to a node's kubeUsage.
func usageOf(pod *trace.Pod) podUsage {
	return podUsage{cpu: pod.MilliCPU, mem: pod.MemoryMiB, gpu: pod.Units(),
		nzCPU: max(pod.NonZeroMilliCPU, pod.MilliCPU), nzMem: max(pod.NonZeroMemoryMiB, pod.MemoryMiB)}
}

// place puts pod on node best and records it in d. Its cards go where
// policy fits them, as the extender's bind does; a pod that asks no GPU
// memory gets none.
func (r *replay) place(pod *trace.Pod, policy allocator.Policy, best int, d *Decision) {
	ns := &r.nodes[best]
	counted := r.hostCounted(ns)
	if counted {
		r.holes.AddHost(ns.cpuFree, -1)
	}
	ns.take(pod)
	d.Node = ns.spec.Name
	if counted {
		r.holes.AddHost(ns.cpuFree, 1)
	}
	if pod.Demand == nil {
		if len(ns.alloc.Cards) > 0 && r.policy == nil {
			// As the extender's cache learns it from the bound pod.
			r.work.ObserveCPUOnly(pod.MilliCPU)
		}
		return
	}
	if err := allocator.FitWith(&ns.alloc, pod.Demand, pod.Constraints, policy, r.best); err != nil {
		panic(fmt.Sprintf("pod %s no longer fits node %s: %v", pod.Name, ns.spec.Name, err))
	}
	r.holes.AddNode(&ns.alloc, -1)
	for i, u := range r.best.Reserved {
		ns.alloc.Cards[i].Used += u
	}
	r.holes.AddNode(&ns.alloc, 1)
	if r.policy == nil {
		// As the extender's cache learns it when its bind holds the cards.
		r.work.ObserveConstrained(pod.Demand, gpushare.ModelRestriction(pod.Constraints, pod.NodeSelector), pod.MilliCPU, pod.MemoryMiB)
	}
	r.placed += r.best.Total()
	d.Cards = make([][]int, len(r.best.Cards))
	for c, poss := range r.best.Cards {
		for _, pos := range poss {
			d.Cards[c] = append(d.Cards[c], ns.alloc.Cards[pos].Index)
		}
		slices.Sort(d.Cards[c]) // by index, as the allocation annotation lists them
	}
}

// hostCounted says whether ns's free CPU counts in the holes'
// FreeMilliCPU. It does when ns has cards, and the extender would know its
// CPU; with Options.GPUOnly, which replays nodes that report none, it does
// not.
func (r *replay) hostCounted(ns *nodeState) bool {
	return len(ns.alloc.Cards) > 0 && !r.opts.GPUOnly
}

// take charges pod's CPU and memory to the node.
func (ns *nodeState) take(pod *trace.Pod) {
	ns.cpuFree -= pod.MilliCPU
	ns.memFree -= pod.MemoryMiB
	pu := usageOf(pod)
	ns.kube.add(&pu)
}

// admits is NodeResourcesFit for CPU and memory, and NodeAffinity for the
// pod's nodeSelector. Which cards the pod may use (gpu_spec, card
// annotations) is the extender's decision, made in choose as the
// extender's filter makes it. kube-scheduler knows nothing of it, so a node
// of other cards still counts in its sample. A model chosen by a
// nodeSelector on the product label (Variant.GPUSpecAsLabel) is
// kube-scheduler's, and such a node does not count.
func (ns *nodeState) admits(pod *trace.Pod) bool {
	return ns.cpuFree >= pod.MilliCPU && ns.memFree >= pod.MemoryMiB && selects(pod.NodeSelector, ns.spec.Labels)
}

// selects reports whether labels carry every label of selector, as
// kube-scheduler's NodeAffinity filter reads spec.nodeSelector.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// mayFit is a quick necessary condition for allocator.Fit: every container
// finds enough cards with its units free. It only spares Fit the work of
// explaining why a pod does not fit.
func mayFit(n *allocator.Node, pod *trace.Pod) bool {
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
