package util

import (
	"strings"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Annotation sets a node annotation.
func (n *NodeWrapper) Annotation(k, v string) *NodeWrapper {
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[k] = v
	return n
}

// Cordon sets the operator's gpushare.io/cordoned-gpus annotation to uuids.
func (n *NodeWrapper) Cordon(uuids ...string) *NodeWrapper {
	return n.Annotation(gpushare.AnnotationCordonedGPUs, strings.Join(uuids, ","))
}

// GPUModels sets the pod's gpushare.io/gpu-models annotation to patterns.
func (p *PodWrapper) GPUModels(patterns ...string) *PodWrapper {
	return p.Annotation(gpushare.AnnotationGPUModels, strings.Join(patterns, ","))
}

// Isolation sets the isolation of card index in the inventory (see
// Cards); "" removes the field, as an inventory from before isolation.
func (n *NodeWrapper) Isolation(index int, m gpushare.Isolation) *NodeWrapper {
	inv, err := gpushare.ParseInventory(n.Annotations[gpushare.AnnotationInventory])
	if err != nil {
		panic(err)
	}
	for i := range inv.Devices {
		if inv.Devices[i].Index == index {
			inv.Devices[i].Isolation = m
		}
	}
	return n.Inventory(inv)
}

// Enforced annotates the pod gpushare.io/isolation: enforced.
func (p *PodWrapper) Enforced() *PodWrapper {
	return p.Annotation(gpushare.AnnotationIsolation, gpushare.IsolationEnforced)
}
