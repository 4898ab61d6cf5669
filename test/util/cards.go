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
