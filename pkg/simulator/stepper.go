package simulator

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// Stepper replays pods one at a time and lets the caller say where each
// went, so that a test can hold a real kube-scheduler and extender to the
// replay: for each pod, Choices says which nodes the replay rates best
// (kube-scheduler takes one of them at random), and Place follows the real
// choice, so the replay stays in step with the cluster. Pods are submitted
// in the caller's order, without clones.
type Stepper struct {
	r *replay
	// pod and policy: the pod Choices was last asked about, and the policy
	// that rated nodes for it.
	pod    *trace.Pod
	policy allocator.Policy
}

// NewStepper returns a Stepper for tr's nodes with opts (as Run completes
// them), before the first pod.
func NewStepper(tr *trace.Trace, opts Options) (*Stepper, error) {
	if err := tr.Validate(); err != nil {
		return nil, err
	}
	if err := opts.complete(); err != nil {
		return nil, err
	}
	r, err := newReplay(tr, opts)
	if err != nil {
		return nil, err
	}
	return &Stepper{r: r}, nil
}

// Choice is what the replay decides for a pod, in its last scheduling
// cycle; node names, sorted.
type Choice struct {
	// Fit: the nodes of the sample where the pod fits (its cards, for a
	// pod that asks GPU memory; its CPU and memory otherwise).
	Fit []string
	// Extender: for a GPU pod, the nodes the extender's filter passes
	// (Cache.FilterBest), with Prio their prioritize scores (Cache.Score
	// over them; parallel to Extender); for a pod that asks no GPU
	// memory, Fit, with Prio the extender's prioritize scores
	// (Cache.ScoreCPU over Fit), nil when no extender prioritizes such pods.
	Extender []string
	Prio     []int64
	// Best: the nodes kube-scheduler rates highest, one of which it
	// takes; none when the pod fits nowhere.
	Best []string
}

// Choices returns what kube-scheduler, with the extender, decides for
// pod. It learns the pod's shape first (as the extender's informer does
// when the pod is created), so it must be called once per pod, before
// Place.
func (s *Stepper) Choices(pod *trace.Pod) Choice {
	s.pod, s.policy = pod, s.r.withDRA(s.r.observe(pod))
	ties, _ := s.r.decide(pod, s.policy)
	var ch Choice
	ch.Best = s.names(ties)
	if len(s.r.fit) == 0 {
		return ch
	}
	ch.Fit = s.names(s.r.fit)
	// Extender and Prio sorted together by name.
	order := make([]int, len(s.r.passed))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		return strings.Compare(s.r.nodes[s.r.passed[a]].spec.Name, s.r.nodes[s.r.passed[b]].spec.Name)
	})
	for _, k := range order {
		ch.Extender = append(ch.Extender, s.r.nodes[s.r.passed[k]].spec.Name)
		if s.r.prio != nil {
			ch.Prio = append(ch.Prio, s.r.prio[k])
		}
	}
	return ch
}

// names returns the sorted names of nodes (indexes of s.r.nodes).
func (s *Stepper) names(nodes []int) []string {
	out := make([]string, len(nodes))
	for i, n := range nodes {
		out[i] = s.r.nodes[n].spec.Name
	}
	slices.Sort(out)
	return out
}

// IdleTainted returns the names of the nodes that carry the device
// plugin's gpushare.io/idle-gpus taint now, sorted (see
// Options.IdleTaintMinCards).
func (s *Stepper) IdleTainted() []string {
	var out []string
	for i := range s.r.nodes {
		if s.r.idleTainted(i) {
			out = append(out, s.r.nodes[i].spec.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Place puts the pod Choices was last asked about on node (by name),
// taking the cards the policy chooses there, as the extender's bind does,
// and returns their indexes per container (none for a pod that asks no GPU
// memory). node "" records that the pod failed.
func (s *Stepper) Place(node string) ([][]int, error) {
	if s.pod == nil {
		return nil, fmt.Errorf("place on %s: no pod was asked about", node)
	}
	pod := s.pod
	s.pod = nil
	if node == "" {
		return nil, nil
	}
	i := slices.IndexFunc(s.r.nodes, func(ns nodeState) bool { return ns.spec.Name == node })
	if i < 0 {
		return nil, fmt.Errorf("pod %s placed on %s, a node the replay does not know", pod.Name, node)
	}
	ns := &s.r.nodes[i]
	if !selects(pod.NodeSelector, ns.spec.Labels) {
		return nil, fmt.Errorf("pod %s placed on %s, whose labels do not match its nodeSelector %v", pod.Name, node, pod.NodeSelector)
	}
	if !ns.admits(pod) {
		return nil, fmt.Errorf("pod %s placed on %s, where its CPU (%d of %d millicores free) or memory (%d of %d MiB free) does not fit", pod.Name, node, pod.MilliCPU, ns.cpuFree, pod.MemoryMiB, ns.memFree)
	}
	if pod.Demand != nil {
		if err := allocator.FitWith(&ns.alloc, pod.Demand, pod.Constraints, s.policy, s.r.cur); err != nil {
			return nil, fmt.Errorf("pod %s placed on %s, where its cards do not fit: %w", pod.Name, node, err)
		}
	}
	var d Decision
	s.r.place(pod, s.policy, i, &d)
	return d.Cards, nil
}
