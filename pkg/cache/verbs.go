package cache

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// scorer rates placements for one pod: with a Host for policies that weigh
// CPU and memory, on nodes that report their CPU.
type scorer struct {
	p    allocator.Policy
	hs   allocator.HostScorer // nil when p weighs cards only
	host allocator.Host
}

// newScorer returns pod's scorer, built from the policy inputs in.
func newScorer(in *policyInputs, pod *kubeinfo.PodInfo) (*scorer, error) {
	p, err := in.policy(pod.Policy)
	if err != nil {
		return nil, err
	}
	if pod.DRA {
		p = allocator.SliceOrder(p)
	}
	sc := &scorer{p: p, host: allocator.Host{PodMilliCPU: pod.MilliCPU, PodMemoryMiB: pod.MemoryMiB, MaxMilliCPU: in.maxMilliCPU, MaxUnits: in.maxUnits}}
	sc.hs, _ = p.(allocator.HostScorer)
	return sc, nil
}

func (sc *scorer) score(s *nodeSnap, pl *allocator.Placement) float64 {
	if sc.hs == nil || !s.hostKnown {
		return sc.p.NodeScore(&s.node, pl)
	}
	sc.host.FreeMilliCPU, sc.host.FreeMemoryMiB = s.freeMilliCPU, s.freeMemMiB
	return sc.hs.NodeScoreHost(&s.node, pl, &sc.host)
}

// ctxCheckNodes is how many nodes a verb fits between two looks at its
// context (a single-card pod takes no search step, so its budget never
// looks).
const ctxCheckNodes = 256

// stopped returns an error naming pod when ctx has ended before the verb
// examined every node, nil otherwise.
func stopped(ctx context.Context, pod *kubeinfo.PodInfo, done, nodes int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pod %s/%s: stopped after %d of %d nodes: %w", pod.Namespace, pod.Name, done, nodes, context.Cause(ctx))
	}
	return nil
}

// pinnedNode returns the node of uid's assumption if the pod has one (its
// bind there has not ended, or ended with an unknown outcome) and the node
// is among nodes. A pod kube-scheduler tries again then goes back to that
// node: a second bind there re-sends the Binding with the same cards, which
// settles the first (Assume is idempotent, and a Binding already made
// answers Conflict, then reads back as bound). Sent elsewhere, its bind
// would be refused (ErrBindInFlight) until the assumption expired,
// AssumeTTL later. It takes no lock.
func (c *Cache) pinnedNode(uid types.UID, nodes []string) (string, bool) {
	v, ok := c.binding.Load(uid)
	if !ok {
		return "", false
	}
	node, _ := v.(string)
	return node, slices.Contains(nodes, node)
}

// pinnedTo is Filter's answer for a pod pinned to node (pinnedNode): node
// alone, the other nodes failed with the reason.
func pinnedTo(node string, nodes []string) (fit []string, failed map[string]string) {
	reason := fmt.Sprintf("the pod's bind to node %s has not ended or its outcome is unknown; it is tried on %s again", node, node)
	failed = make(map[string]string, len(nodes)-1)
	for _, n := range nodes {
		if n != node {
			failed[n] = reason
		}
	}
	return []string{node}, failed
}

// Filter splits nodes into those where pod's Demand fits, on the cards its
// constraints allow, and those where it does not, with the reason for each.
// It fails, naming the pod, when no node could take it, and when ctx ends
// before every node was examined. It reads the nodes' published copies
// and takes no lock. The searches of all nodes together spend one request
// budget (allocator.DefaultRequestSteps); nodes it leaves unexamined fail
// with a reason that says so.
func (c *Cache) Filter(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (fit []string, failed map[string]string, err error) {
	if err := pod.Placeable(); err != nil {
		return nil, nil, err
	}
	if node, ok := c.pinnedNode(pod.UID, nodes); ok {
		fit, failed = pinnedTo(node, nodes)
		return fit, failed, nil
	}
	b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
	cr := c.creditFor(pod.UID)
	failed = map[string]string{}
	var pl allocator.Placement // reused across nodes
	for i, name := range nodes {
		if i%ctxCheckNodes == ctxCheckNodes-1 {
			if err := stopped(ctx, pod, i, len(nodes)); err != nil {
				return nil, nil, err
			}
		}
		if _, reason := c.fitSnap(name, pod, cr, allocator.Binpack{}, &pl, b); reason != "" {
			failed[name] = reason
			continue
		}
		fit = append(fit, name)
	}
	return fit, failed, stopped(ctx, pod, len(nodes), len(nodes))
}

// FilterBest is Filter keeping, of the nodes where pod's Demand fits, only
// those Score rates highest (allocator.MaxScore), and of those the first
// allocator.MaxBestNodes in nodes' order: the extender's choice of node
// then decides, and kube-scheduler's own scores only break ties among
// them. The nodes left out are not failed (they fit; they are not the
// best, or not needed). Each node is fitted once.
func (c *Cache) FilterBest(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (best []string, failed map[string]string, err error) {
	if err := pod.Placeable(); err != nil {
		return nil, nil, err
	}
	if node, ok := c.pinnedNode(pod.UID, nodes); ok {
		best, failed = pinnedTo(node, nodes)
		return best, failed, nil
	}
	ev, err := c.evaluate(ctx, pod, nodes)
	if err != nil {
		return nil, nil, err
	}
	defer ev.release()
	failed = ev.failed(nodes)
	lo, hi := ev.scoreRange()
	best = make([]string, 0, min(len(nodes), allocator.MaxBestNodes))
	for i, name := range nodes {
		if ev.fits[i] && allocator.Normalize(ev.raw[i], lo, hi) == allocator.MaxScore {
			if best = append(best, name); len(best) == allocator.MaxBestNodes {
				break
			}
		}
	}
	return best, failed, nil
}

// Score rates each node for pod's Demand with the pod's policy (the
// default when it names none), 0..allocator.MaxScore, parallel to nodes. A
// node where the demand does not fit scores 0. Policies that weigh CPU and
// memory too (allocator.HostScorer) are given the node's free CPU and memory
// and the pod's requests, on nodes that report their CPU.
func (c *Cache) Score(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) ([]int64, error) {
	ev, err := c.evaluate(ctx, pod, nodes)
	if err != nil {
		return nil, err
	}
	defer ev.release()
	lo, hi := ev.scoreRange()
	scores := make([]int64, len(nodes))
	for i := range nodes {
		if ev.fits[i] {
			scores[i] = allocator.Normalize(ev.raw[i], lo, hi)
		}
	}
	return scores, nil
}

// ScoreCPU rates each node for pod, which asks no GPU memory, with the
// pod's policy (the default when it names none), parallel to nodes:
// allocator.MaxScore for the nodes where its CPUScorer rates the pod
// highest (it strands the least GPU memory there), 0 for the others
// (allocator.MarkBest). A node the cache does not know, or that reports no
// CPU, strands nothing. A policy that is no CPUScorer rates every node
// MaxScore (no opinion: kube-scheduler's own scores choose). It takes no
// lock.
func (c *Cache) ScoreCPU(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) ([]int64, error) {
	in := c.inputs.Load()
	p, err := in.policy(pod.Policy)
	if err != nil {
		return nil, err
	}
	raw := make([]float64, len(nodes))
	if cs, ok := p.(allocator.CPUScorer); ok {
		host := allocator.Host{PodMilliCPU: pod.MilliCPU, PodMemoryMiB: pod.MemoryMiB, MaxMilliCPU: in.maxMilliCPU, MaxUnits: in.maxUnits}
		for i, name := range nodes {
			if i%ctxCheckNodes == ctxCheckNodes-1 {
				if err := stopped(ctx, pod, i, len(nodes)); err != nil {
					return nil, err
				}
			}
			s := c.snapOf(name)
			if s == nil || !s.hostKnown {
				continue
			}
			host.FreeMilliCPU, host.FreeMemoryMiB = s.freeMilliCPU, s.freeMemMiB
			raw[i] = cs.NodeScoreCPU(&s.node, &host)
		}
	}
	return allocator.MarkBest(raw), nil
}

// evaluation is what evaluate found of each node of a verb's list, parallel
// to it: whether the pod's Demand fits, with the node's raw score
// (allocator.Policy.NodeScore or NodeScoreHost), or why not. Its slices come
// from evalPool and go back with release, so a verb over thousands of nodes
// allocates none of them (at 15,000 nodes they were most of the 0.76 MB a
// FilterBest allocated, and so of the garbage collections the extender ran
// while it served kube-scheduler).
type evaluation struct {
	raw     []float64
	fits    []bool
	reasons []string // "" where the demand fits
}

// evalPool holds evaluations for reuse.
var evalPool = sync.Pool{New: func() any { return new(evaluation) }}

// newEvaluation returns an evaluation for n nodes, every node not fitting
// yet.
func newEvaluation(n int) *evaluation {
	ev := evalPool.Get().(*evaluation)
	if cap(ev.raw) < n {
		ev.raw, ev.fits, ev.reasons = make([]float64, n), make([]bool, n), make([]string, n)
	}
	ev.raw, ev.fits, ev.reasons = ev.raw[:n], ev.fits[:n], ev.reasons[:n]
	clear(ev.fits)
	return ev
}

// release returns ev to evalPool; ev must not be used after. It drops the
// reasons, so a pooled evaluation keeps no string alive.
func (ev *evaluation) release() {
	clear(ev.reasons)
	evalPool.Put(ev)
}

// failed returns, by node name, why the demand does not fit on each node
// of nodes (ev's list) where it does not.
func (ev *evaluation) failed(nodes []string) map[string]string {
	failed := map[string]string{}
	for i, ok := range ev.fits {
		if !ok {
			failed[nodes[i]] = ev.reasons[i]
		}
	}
	return failed
}

// scoreRange returns the lowest and the highest raw score of the nodes
// where the demand fits, the range allocator.Normalize maps to
// 0..allocator.MaxScore (as allocator.NormalizeScores does over them).
func (ev *evaluation) scoreRange() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for i, ok := range ev.fits {
		if ok {
			lo, hi = min(lo, ev.raw[i]), max(hi, ev.raw[i])
		}
	}
	return lo, hi
}

// evaluate fits pod's Demand on each of nodes with the pod's policy,
// reading the nodes' published copies without a lock and spending one
// request budget, as Filter does, and records each node's raw score or why
// the demand does not fit there. A pod that needs no search
// (allocator.Searches: one container, one card) on a long list of nodes is
// fitted by several goroutines at once (fitChunk). The caller releases the
// evaluation.
func (c *Cache) evaluate(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (*evaluation, error) {
	if err := pod.Placeable(); err != nil {
		return nil, err
	}
	in := c.inputs.Load() // one policy for every node, whichever goroutine fits it
	if _, err := in.policy(pod.Policy); err != nil {
		return nil, err
	}
	cr := c.creditFor(pod.UID) // room reserved for the pod (preempt.go) is free to it
	ev := newEvaluation(len(nodes))
	workers := 1
	if !allocator.Searches(pod.Demand) {
		workers = min(runtime.GOMAXPROCS(0), len(nodes)/parallelMinNodes)
	}
	idx := c.index.Load()
	var err error
	if workers <= 1 {
		var f *fitter
		if f, err = newFitter(in, pod); err == nil {
			b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
			err = c.fitChunk(ctx, idx, f, pod, cr, nodes, 0, len(nodes), b, ev)
		}
	} else {
		// The workers take parallelChunk nodes at a time, in turn: on a
		// busy machine one that gets less of a processor fits fewer, where
		// fixed shares left the verb waiting for the slowest.
		var next atomic.Int64
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				f, err := newFitter(in, pod)
				for err == nil {
					lo := int(next.Add(parallelChunk)) - parallelChunk
					if lo >= len(nodes) {
						return
					}
					if err = stopped(ctx, pod, lo, len(nodes)); err == nil {
						err = c.fitChunk(ctx, idx, f, pod, cr, nodes, lo, min(lo+parallelChunk, len(nodes)), nil, ev)
					}
				}
				errs[w] = err
			})
		}
		wg.Wait()
		err = errors.Join(errs...)
	}
	if err == nil {
		err = stopped(ctx, pod, len(nodes), len(nodes))
	}
	if err != nil {
		ev.release()
		return nil, err
	}
	return ev, nil
}

// parallelMinNodes is how many nodes each goroutine of evaluate fits at
// least: fewer are not worth starting one for (a node takes a few hundred
// nanoseconds).
const parallelMinNodes = 1024

// parallelChunk is how many nodes a goroutine of evaluate takes at a time:
// a multiple of fitBlock, and ctxCheckNodes, as evaluate looks at the
// context before each.
const parallelChunk = ctxCheckNodes

// fitter is what one goroutine of evaluate fits with: its own scorer (a
// policy keeps memos) and placement, reused across nodes.
type fitter struct {
	sc *scorer
	pl allocator.Placement
}

func newFitter(in *policyInputs, pod *kubeinfo.PodInfo) (*fitter, error) {
	sc, err := newScorer(in, pod)
	if err != nil {
		return nil, err
	}
	return &fitter{sc: sc}, nil
}

// fitChunk fits pod on nodes[lo:hi], found in idx, with f, spending b
// (nil for a pod that takes no search step), with cr the room reserved
// for the pod (nil when none) free to it, and records in ev, at each
// node's index, whether it fits and its raw score, or why not. Several run
// at once on disjoint ranges (cr is only read).
func (c *Cache) fitChunk(ctx context.Context, idx *nodeIndex, f *fitter, pod *kubeinfo.PodInfo, cr *credit, nodes []string, lo, hi int, b *allocator.Budget, ev *evaluation) error {
	raw, fits, reasons := ev.raw, ev.fits, ev.reasons
	// Block by block, first find each node's published copy and screen
	// out the nodes that take no GPU pod: a short loop, so the processor
	// overlaps the memory loads of many nodes (the index and the copies
	// are spread over the heap; fitting them one at a time waited for each
	// in turn, most of the verb's time at 5,000 nodes). Then fit the
	// block's others while their copies are still in the processor's
	// cache.
	var snaps [fitBlock]*nodeSnap
	sc, pl := f.sc, &f.pl
	for blo := lo; blo < hi; blo += fitBlock {
		bhi := min(blo+fitBlock, hi)
		if blo > lo && (blo-lo)%ctxCheckNodes == 0 {
			if err := stopped(ctx, pod, blo, len(nodes)); err != nil {
				return err
			}
		}
		for i := blo; i < bhi; i++ {
			var s *nodeSnap
			if slot := idx.lookup(nodes[i]); slot != nil {
				s = slot.snap.Load()
			}
			snaps[i-blo], reasons[i], _ = gpuOf(s)
		}
		for i := blo; i < bhi; i++ {
			s := cr.on(snaps[i-blo]).forMPS(pod.MPSUser)
			if s == nil {
				continue
			}
			if reason := fitReason(&s.node, s.source, s.invErr, pod, sc.p, pl, b); reason != "" {
				reasons[i] = reason
				continue
			}
			raw[i], fits[i] = sc.score(s, pl), true
		}
	}
	return nil
}

// fitBlock is how many nodes fitChunk looks up before it fits them: enough
// for the processor to overlap their loads, few enough that their copies
// stay in its cache until they are fitted. ctxCheckNodes is a multiple.
const fitBlock = 64
