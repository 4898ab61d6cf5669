package trace

import (
	"fmt"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Node is one node of a simulated cluster, empty.
type Node struct {
	Name string
	// MilliCPU and MemoryMiB are what the node offers pods (allocatable).
	MilliCPU, MemoryMiB int64
	// Model of the node's first card ("" when unknown), for fgd's target
	// workload; gpu_spec is matched against each card's own model.
	Model string
	// Unit of the cards' memory: "milli" (thousandths of a card) for openb,
	// the inventory's unit for Kubernetes nodes.
	Unit string
	// Cards with Used 0, ordered by index.
	Cards []allocator.Card
	// Zone is the node's region and zone as kube-scheduler's node tree
	// keys them ("" for none; see ZoneKey); it orders the nodes that
	// kube-scheduler samples.
	Zone string
	// Labels are what pods select the node by (Pod.NodeSelector): a
	// Kubernetes node's own; for an openb node, the model and count labels
	// the device plugin publishes for its cards (NodeLabels).
	Labels map[string]string
}

// NodeLabels returns the labels, ours and GPU Feature Discovery's, that
// the device plugin publishes for a node whose first card is firstModel
// and which has cards healthy cards, and that pods select models by
// (gpushare.SelectionLabels).
func NodeLabels(firstModel string, cards int) map[string]string {
	own, nvidia := gpushare.SelectionLabels(firstModel, cards)
	for k, v := range nvidia {
		own[k] = v
	}
	return own
}

// Kind sorts pods for the failed-pod counts.
type Kind string

// Pod kinds.
const (
	// KindCPU asks no GPU memory: placed by CPU and memory only.
	KindCPU Kind = "cpu"
	// KindShare asks part of one card.
	KindShare Kind = "share"
	// KindWhole asks one whole card (openb num_gpu 1, gpu_milli 1000).
	KindWhole Kind = "1-gpu"
	// KindMulti asks several cards.
	KindMulti Kind = "multi-gpu"
)

// Kinds lists the kinds in report order.
var Kinds = []Kind{KindCPU, KindShare, KindWhole, KindMulti}

// Pod is one task to place.
type Pod struct {
	// Name sorts the pods before the shuffle ("namespace/name" for
	// Kubernetes pods).
	Name string
	// MilliCPU and MemoryMiB are the pod's requests as NodeResourcesFit
	// counts them.
	MilliCPU, MemoryMiB int64
	// NonZeroMilliCPU and NonZeroMemoryMiB are the requests as
	// kube-scheduler's NodeResourcesFit scores count them: a container
	// that requests no CPU (memory) counts 100 millicores (200 MiB). 0
	// when the same as MilliCPU (MemoryMiB).
	NonZeroMilliCPU, NonZeroMemoryMiB int64
	// Demand is the GPU memory asked, in the nodes' unit; nil for KindCPU.
	Demand gpushare.Demand
	// Models the pod's cards may be (openb gpu_spec, a Kubernetes pod's
	// gpushare.io/gpu-models) as fgd's target workload reads them, exactly;
	// empty: any.
	Models []string
	// Constraints are the cards the pod may use (nil: any), which the
	// replay applies as the extender does (allocator.FitWith): openb's
	// gpu_spec as exact models, a Kubernetes pod's gpushare.io/gpu-*
	// annotations as they are.
	Constraints *gpushare.CardConstraints
	// NodeSelector: the labels a node must carry (spec.nodeSelector), as
	// kube-scheduler's NodeAffinity filter applies them; nil: any node.
	NodeSelector map[string]string
	Kind         Kind
}

// Units returns the GPU memory the pod holds once placed.
func (p *Pod) Units() int64 {
	if p.Demand == nil {
		return 0
	}
	return p.Demand.Total()
}

// Trace is a cluster and the pods to replay on it.
type Trace struct {
	Nodes []Node
	Pods  []Pod
}

// Capacity returns the units of all healthy cards.
func (t *Trace) Capacity() int64 {
	var c int64
	for i := range t.Nodes {
		c += (&allocator.Node{Cards: t.Nodes[i].Cards}).Capacity()
	}
	return c
}

// Validate checks what simulator.Run relies on: at least one card, one pod, and a
// single memory unit across the nodes (capacity shares would mix GiB and MiB
// otherwise).
func (t *Trace) Validate() error {
	if t.Capacity() == 0 {
		return fmt.Errorf("the %d nodes have no healthy GPU: nothing to allocate", len(t.Nodes))
	}
	if len(t.Pods) == 0 {
		return fmt.Errorf("no pods to replay")
	}
	unit, first := "", ""
	for i := range t.Nodes {
		n := &t.Nodes[i]
		if len(n.Cards) == 0 {
			continue
		}
		if unit == "" {
			unit, first = n.Unit, n.Name
		} else if n.Unit != unit {
			return fmt.Errorf("node %s counts GPU memory in %s but node %s in %s; the simulator needs one unit", n.Name, n.Unit, first, unit)
		}
	}
	return nil
}
