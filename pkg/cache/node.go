package cache

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Where a node's card list came from.
const (
	SourceInventory = "inventory" // the device plugin's gpushare.io/devices annotation
	SourceCapacity  = "capacity"  // aliyun.com/gpu-mem ÷ aliyun.com/gpu-count
	SourceNone      = "none"      // the node reports no GPU memory
)

// nodeCards returns the cards of node, Used zero. It prefers the inventory
// annotation; without one (or with an invalid one, returned as invErr) it
// divides the node's allocatable (else capacity) aliyun.com/gpu-mem evenly
// over aliyun.com/gpu-count cards, rounding down: 50 units on 3 cards gives
// three cards of 16.
func nodeCards(node *corev1.Node) (unit string, cards []allocator.Card, source string, invErr error) {
	if s, ok := node.Annotations[gpushare.AnnotationInventory]; ok {
		inv, err := gpushare.ParseInventory(s)
		if err == nil {
			for _, d := range inv.Devices {
				cards = append(cards, allocator.Card{Index: d.Index, UUID: d.UUID, Model: d.Model, Total: d.Memory, Healthy: d.Healthy, Isolation: d.Mode()})
			}
			slices.SortFunc(cards, func(a, b allocator.Card) int { return cmp.Compare(a.Index, b.Index) })
			return inv.Unit, cards, SourceInventory, nil
		}
		invErr = fmt.Errorf("node %s: ignoring annotation %s: %w", node.Name, gpushare.AnnotationInventory, err)
	}
	mem := quantity(node, gpushare.ResourceGPUMem)
	if mem <= 0 {
		return gpushare.DefaultUnit, nil, SourceNone, invErr
	}
	count := quantity(node, gpushare.ResourceGPUCount)
	if count <= 0 {
		count = 1
	}
	if count > maxCardsPerNode {
		return gpushare.DefaultUnit, nil, SourceNone, fmt.Errorf("node %s: %s is %d, more than %d; ignoring the node's GPUs", node.Name, gpushare.ResourceGPUCount, count, maxCardsPerNode)
	}
	per := mem / count
	if per <= 0 {
		return gpushare.DefaultUnit, nil, SourceNone, invErr
	}
	for i := range count {
		cards = append(cards, allocator.Card{Index: int(i), Total: per, Healthy: true, Isolation: gpushare.IsolationNone})
	}
	return gpushare.DefaultUnit, cards, SourceCapacity, invErr
}

// cordonCards marks the cards of node that its gpushare.io/cordoned-gpus
// annotation names, and returns the UUIDs it names that no card has. An
// invalid annotation marks every card (fail closed: an operator meant to
// keep pods off some of them) and is returned as err.
func cordonCards(node *corev1.Node, cards []allocator.Card) (missing []string, err error) {
	s, ok := node.Annotations[gpushare.AnnotationCordonedGPUs]
	if !ok {
		return nil, nil
	}
	uuids, err := gpushare.ParseCordonedGPUs(s)
	if err != nil {
		for i := range cards {
			cards[i].Cordoned = true
		}
		return nil, fmt.Errorf("%w; the node takes no new GPU pods until the annotation is fixed", err)
	}
	for _, u := range uuids {
		found := false
		for i := range cards {
			if cards[i].UUID == u {
				cards[i].Cordoned, found = true, true
			}
		}
		if !found {
			missing = append(missing, u)
		}
	}
	return missing, nil
}

// maxCardsPerNode bounds the cards the capacity fallback creates, so a
// mistyped gpu-count cannot make the extender allocate without bound.
const maxCardsPerNode = 256

// quantity returns the node's allocatable amount of r, else its capacity.
func quantity(node *corev1.Node, r corev1.ResourceName) int64 {
	if q, ok := node.Status.Allocatable[r]; ok {
		return q.Value()
	}
	if q, ok := node.Status.Capacity[r]; ok {
		return q.Value()
	}
	return 0
}
