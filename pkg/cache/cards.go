package cache

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// nodeCards returns the cards of node, Used zero. It prefers the inventory
// annotation. Without one, or with an invalid one (returned as invErr), it
// divides the node's allocatable (else capacity) aliyun.com/gpu-mem evenly
// over aliyun.com/gpu-count cards, rounding down. For example, 50 units on
// 3 cards gives three cards of 16.
func nodeCards(node *kubeinfo.NodeInfo) (unit string, cards []allocator.Card, source string, invErr error) {
	if annotation, ok := node.Inventory(); ok {
		inv, err := gpushare.ParseInventory(annotation)
		if err == nil {
			// One allocation for the node's infos: a constrained fit reads
			// them card after card.
			infos := make([]allocator.CardInfo, len(inv.Devices))
			for i, d := range inv.Devices {
				infos[i] = allocator.CardInfo{UUID: d.UUID, Model: d.Model, Isolation: d.Mode()}
				cards = append(cards, allocator.Card{Index: d.Index, Total: d.Memory, Healthy: d.Healthy, Info: &infos[i]})
			}
			slices.SortFunc(cards, func(a, b allocator.Card) int { return cmp.Compare(a.Index, b.Index) })
			return inv.Unit, cards, inspectapi.SourceInventory, nil
		}
		invErr = fmt.Errorf("node %s: ignoring annotation %s: %w", node.Name, gpushare.AnnotationInventory, err)
	}
	mem, count := node.GPUs()
	if mem <= 0 {
		return gpushare.DefaultUnit, nil, inspectapi.SourceNone, invErr
	}
	if count <= 0 {
		count = 1
	}
	if count > maxCardsPerNode {
		return gpushare.DefaultUnit, nil, inspectapi.SourceNone, fmt.Errorf("node %s: %s is %d, more than %d; ignoring the node's GPUs", node.Name, gpushare.ResourceGPUCount, count, maxCardsPerNode)
	}
	per := mem / count
	if per <= 0 {
		return gpushare.DefaultUnit, nil, inspectapi.SourceNone, invErr
	}
	for i := range count {
		cards = append(cards, allocator.Card{Index: int(i), Total: per, Healthy: true, Info: capacityInfo})
	}
	return gpushare.DefaultUnit, cards, inspectapi.SourceCapacity, invErr
}

// capacityInfo is what is known of a card counted from capacity alone, with
// no inventory: its isolation, none. Every such card shares it; it is never
// modified.
var capacityInfo = &allocator.CardInfo{Isolation: gpushare.IsolationNone}

// cordonCards marks the cards of node that its gpushare.io/cordoned-gpus
// annotation names, and returns the UUIDs it names that no card has. An
// invalid annotation marks every card and is returned as err. That fails
// closed: an operator meant to keep pods off some of them.
func cordonCards(node *kubeinfo.NodeInfo, cards []allocator.Card) (missing []string, err error) {
	annotation, ok := node.CordonedGPUs()
	if !ok {
		return nil, nil
	}
	uuids, err := gpushare.ParseCordonedGPUs(annotation)
	if err != nil {
		for i := range cards {
			cards[i].Cordoned = true
		}
		return nil, fmt.Errorf("%w; the node takes no new GPU pods until the annotation is fixed", err)
	}
	for _, u := range uuids {
		found := false
		for i := range cards {
			if cards[i].UUID() == u {
				cards[i].Cordoned, found = true, true
			}
		}
		if !found {
			missing = append(missing, u)
		}
	}
	return missing, nil
}

// maxCardsPerNode bounds the cards the capacity fallback creates, so that
// a mistyped gpu-count cannot make the extender allocate without bound.
const maxCardsPerNode = 256
