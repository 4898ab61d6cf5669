package view

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

// scorer rates placements for one pod. For policies that weigh CPU and
// memory it has a Host, on nodes that report their CPU.
type scorer struct {
	p    allocator.Policy
	hs   allocator.HostScorer // nil when p weighs cards only
	host allocator.Host
}

// newScorer returns pod's scorer, built from the policy inputs in.
func newScorer(in *Inputs, pod *kubeinfo.PodInfo) (*scorer, error) {
	p, err := in.Policy(pod.Policy, pod.Models)
	if err != nil {
		return nil, err
	}
	if pod.DRA {
		p = allocator.SliceOrder(p)
	}
	sc := &scorer{p: p, host: allocator.Host{PodMilliCPU: pod.MilliCPU, PodMemoryMiB: pod.MemoryMiB, MaxMilliCPU: in.MaxMilliCPU, MaxUnits: in.MaxUnits}}
	sc.hs, _ = p.(allocator.HostScorer)
	return sc, nil
}

func (sc *scorer) score(s *Snap, pl *allocator.Placement) float64 {
	if sc.hs == nil || !s.HostKnown {
		return sc.p.NodeScore(&s.Node, pl)
	}
	sc.host.FreeMilliCPU, sc.host.FreeMemoryMiB = s.FreeMilliCPU, s.FreeMemMiB
	return sc.hs.NodeScoreHost(&s.Node, pl, &sc.host)
}

// CtxCheckNodes is how many nodes a verb fits between two looks at its
// context. A single-card pod takes no search step, so its budget never
// looks.
const CtxCheckNodes = 256

// Stopped returns an error naming pod when ctx has ended before the verb
// examined every node, nil otherwise.
func Stopped(ctx context.Context, pod *kubeinfo.PodInfo, done, nodes int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pod %s/%s: stopped after %d of %d nodes: %w", pod.Namespace, pod.Name, done, nodes, context.Cause(ctx))
	}
	return nil
}

// pinnedNode returns the node of uid's assumption if the pod has one and
// the node is among nodes. An assumption stands while its bind has not
// ended, or ended with an unknown outcome. A pod kube-scheduler tries again
// then goes back to that node. A second bind there re-sends the Binding
// with the same cards, which settles the first: Assume is idempotent, and a
// Binding already made answers Conflict, then reads back as bound. Sent
// elsewhere, its bind would be refused (ErrBindInFlight) until the
// assumption expired, AssumeTTL later. It takes no lock.
func (v *View) pinnedNode(uid types.UID, nodes []string) (string, bool) {
	val, ok := v.binding.Load(uid)
	if !ok {
		return "", false
	}
	node, _ := val.(string)
	return node, slices.Contains(nodes, node)
}

// pinnedTo is Filter's answer for a pod pinned to node (pinnedNode): node
// alone, and the other nodes failed with the reason.
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

// Filter is cache.Cache.Filter.
func (v *View) Filter(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (fit []string, failed map[string]string, err error) {
	if err := pod.Placeable(); err != nil {
		return nil, nil, err
	}
	if node, ok := v.pinnedNode(pod.UID, nodes); ok {
		fit, failed = pinnedTo(node, nodes)
		return fit, failed, nil
	}
	b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
	cr := v.credit(pod.UID)
	failed = map[string]string{}
	var pl allocator.Placement // reused across nodes
	for i, name := range nodes {
		if i%CtxCheckNodes == CtxCheckNodes-1 {
			if err := Stopped(ctx, pod, i, len(nodes)); err != nil {
				return nil, nil, err
			}
		}
		if _, reason := v.fitSnap(name, pod, cr, allocator.Binpack{}, &pl, b); reason != "" {
			failed[name] = reason
			continue
		}
		fit = append(fit, name)
	}
	return fit, failed, Stopped(ctx, pod, len(nodes), len(nodes))
}

// FilterBest is cache.Cache.FilterBest.
func (v *View) FilterBest(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (best []string, failed map[string]string, err error) {
	if err := pod.Placeable(); err != nil {
		return nil, nil, err
	}
	if node, ok := v.pinnedNode(pod.UID, nodes); ok {
		best, failed = pinnedTo(node, nodes)
		return best, failed, nil
	}
	ev, err := v.evaluate(ctx, pod, nodes)
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

// Score is cache.Cache.Score.
func (v *View) Score(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) ([]int64, error) {
	ev, err := v.evaluate(ctx, pod, nodes)
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

// ScoreCPU is cache.Cache.ScoreCPU.
func (v *View) ScoreCPU(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) ([]int64, error) {
	in := v.inputs.Load()
	p, err := in.Policy(pod.Policy, pod.Models)
	if err != nil {
		return nil, err
	}
	raw := make([]float64, len(nodes))
	if cs, ok := p.(allocator.CPUScorer); ok {
		host := allocator.Host{PodMilliCPU: pod.MilliCPU, PodMemoryMiB: pod.MemoryMiB, MaxMilliCPU: in.MaxMilliCPU, MaxUnits: in.MaxUnits}
		for i, name := range nodes {
			if i%CtxCheckNodes == CtxCheckNodes-1 {
				if err := Stopped(ctx, pod, i, len(nodes)); err != nil {
					return nil, err
				}
			}
			s := v.Snap(name)
			if s == nil || !s.HostKnown {
				continue
			}
			host.FreeMilliCPU, host.FreeMemoryMiB = s.FreeMilliCPU, s.FreeMemMiB
			raw[i] = cs.NodeScoreCPU(&s.Node, &host)
		}
	}
	return allocator.MarkBest(raw), nil
}

// evaluation is what evaluate found of each node of a verb's list, parallel
// to it: whether the pod's Demand fits, with the node's raw score
// (allocator.Policy.NodeScore or NodeScoreHost), or why not. Its slices
// come from evalPool and go back with release. So a verb over thousands of
// nodes allocates none of them, and makes the collector run less
// (measured: docs/benchmarks.md#scale-issue-26).
type evaluation struct {
	raw     []float64
	fits    []bool
	reasons []string // "" where the demand fits
}

// evalPool holds evaluations for reuse.
var evalPool = sync.Pool{New: func() any { return new(evaluation) }}

// newEvaluation returns an evaluation for n nodes, none fitting yet.
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
// reasons, so that a pooled evaluation keeps no string alive.
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
// where the demand fits. allocator.Normalize maps that range to
// 0..allocator.MaxScore, as allocator.NormalizeScores does over them.
func (ev *evaluation) scoreRange() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for i, ok := range ev.fits {
		if ok {
			lo, hi = min(lo, ev.raw[i]), max(hi, ev.raw[i])
		}
	}
	return lo, hi
}

// evaluate fits pod's Demand on each of nodes with the pod's policy, and
// records each node's raw score or why the demand does not fit there. Like
// Filter, it reads the nodes' published copies without a lock and spends
// one request budget. A pod that needs no search (allocator.Searches: one
// container, one card) on a long list of nodes is fitted by several
// goroutines at once (fitChunk). The caller releases the evaluation.
func (v *View) evaluate(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (*evaluation, error) {
	if err := pod.Placeable(); err != nil {
		return nil, err
	}
	in := v.inputs.Load() // one policy for every node, whichever goroutine fits it
	if _, err := in.Policy(pod.Policy, pod.Models); err != nil {
		return nil, err
	}
	cr := v.credit(pod.UID) // room reserved for the pod (preempt.go) is free to it
	ev := newEvaluation(len(nodes))
	workers := 1
	if !allocator.Searches(pod.Demand) {
		workers = min(runtime.GOMAXPROCS(0), len(nodes)/ParallelMinNodes)
	}
	idx := v.index.Load()
	var err error
	if workers <= 1 {
		var f *fitter
		if f, err = newFitter(in, pod); err == nil {
			b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
			err = v.fitChunk(ctx, idx, f, pod, cr, nodes, 0, len(nodes), b, ev)
		}
	} else {
		// The workers take ParallelChunk nodes at a time, in turn. On a
		// busy machine, a worker that gets less of a processor fits fewer.
		// Fixed shares left the verb waiting for the slowest.
		var next atomic.Int64
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				f, err := newFitter(in, pod)
				for err == nil {
					lo := int(next.Add(ParallelChunk)) - ParallelChunk
					if lo >= len(nodes) {
						return
					}
					if err = Stopped(ctx, pod, lo, len(nodes)); err == nil {
						err = v.fitChunk(ctx, idx, f, pod, cr, nodes, lo, min(lo+ParallelChunk, len(nodes)), nil, ev)
					}
				}
				errs[w] = err
			})
		}
		wg.Wait()
		err = errors.Join(errs...)
	}
	if err == nil {
		err = Stopped(ctx, pod, len(nodes), len(nodes))
	}
	if err != nil {
		ev.release()
		return nil, err
	}
	return ev, nil
}

// Evaluate is evaluate for the cache's tests: each node's raw score and
// whether the demand fits there, and the reasons of the nodes where it
// does not.
func (v *View) Evaluate(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (raw []float64, fits []bool, failed map[string]string, err error) {
	ev, err := v.evaluate(ctx, pod, nodes)
	if err != nil {
		return nil, nil, nil, err
	}
	defer ev.release()
	return slices.Clone(ev.raw), slices.Clone(ev.fits), ev.failed(nodes), nil
}

// ParallelMinNodes is the fewest nodes each goroutine of evaluate fits.
// Fewer are not worth starting one for: a node takes a few hundred
// nanoseconds.
const ParallelMinNodes = 1024

// ParallelChunk is how many nodes a goroutine of evaluate takes at a time.
// It is a multiple of FitBlock, and of CtxCheckNodes, as evaluate looks at
// the context before each chunk.
const ParallelChunk = CtxCheckNodes

// fitter is what one goroutine of evaluate fits with, reused across nodes:
// its own scorer (a policy keeps memos) and placement.
type fitter struct {
	sc *scorer
	pl allocator.Placement
}

func newFitter(in *Inputs, pod *kubeinfo.PodInfo) (*fitter, error) {
	sc, err := newScorer(in, pod)
	if err != nil {
		return nil, err
	}
	return &fitter{sc: sc}, nil
}

// fitChunk fits pod on nodes[lo:hi], found in idx, with f, spending b (nil
// for a pod that takes no search step). cr is the room reserved for the
// pod, free to it; nil when none. It records in ev, at each node's index,
// whether the pod fits and its raw score, or why not. Several run at once
// on disjoint ranges; cr is only read.
func (v *View) fitChunk(ctx context.Context, idx *Index, f *fitter, pod *kubeinfo.PodInfo, cr *Credit, nodes []string, lo, hi int, b *allocator.Budget, ev *evaluation) error {
	raw, fits, reasons := ev.raw, ev.fits, ev.reasons
	// Block by block, first find each node's published copy and screen
	// out the nodes that take no GPU pod. In that short loop the processor
	// overlaps the memory loads of many nodes: the index and the copies
	// are spread over the heap, and fitting them one at a time waited for
	// each in turn. Then fit the block's other nodes while their copies are
	// still in the processor's cache.
	var snaps [FitBlock]*Snap
	sc, pl := f.sc, &f.pl
	for blo := lo; blo < hi; blo += FitBlock {
		bhi := min(blo+FitBlock, hi)
		if blo > lo && (blo-lo)%CtxCheckNodes == 0 {
			if err := Stopped(ctx, pod, blo, len(nodes)); err != nil {
				return err
			}
		}
		for i := blo; i < bhi; i++ {
			var s *Snap
			if slot := idx.Lookup(nodes[i]); slot != nil {
				s = slot.Snap.Load()
			}
			snaps[i-blo], reasons[i], _ = GPUOf(s)
		}
		for i := blo; i < bhi; i++ {
			s := cr.On(snaps[i-blo]).ForMPS(pod.MPSUser)
			if s == nil {
				continue
			}
			if reason := FitReason(&s.Node, s.Source, s.InvErr, pod, sc.p, pl, b); reason != "" {
				reasons[i] = reason
				continue
			}
			raw[i], fits[i] = sc.score(s, pl), true
		}
	}
	return nil
}

// FitBlock is how many nodes fitChunk looks up before it fits them: enough
// for the processor to overlap their loads, and few enough that their
// copies stay in its cache until fitted. CtxCheckNodes is a multiple.
const FitBlock = 64

// FitsOutside is cache.Cache.FitsOutside.
func (v *View) FitsOutside(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string, usable func(node string) bool) (string, bool) {
	if pod.Placeable() != nil {
		return "", false
	}
	sent := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		sent[n] = true
	}
	b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
	cr := v.credit(pod.UID)
	var pl allocator.Placement
	x := v.index.Load()
	for _, m := range []map[string]*Slot{x.base, x.recent} {
		for name := range m {
			if sent[name] || b.Err() != nil {
				continue
			}
			s, _ := v.fitSnap(name, pod, cr, allocator.Binpack{}, &pl, b)
			if s == nil || s.HostKnown && (s.FreeMilliCPU < pod.MilliCPU || s.FreeMemMiB < pod.MemoryMiB) {
				continue
			}
			if usable == nil || usable(name) {
				return name, true
			}
		}
	}
	// A search the budget cut short may have missed a fit: say so.
	return "", b.Err() != nil
}
