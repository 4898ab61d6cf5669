package util

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// PodWrapper builds a Pod.
type PodWrapper struct{ corev1.Pod }

// MakePod returns a pod in namespace "default" with UID "uid-NAME" and no containers.
func MakePod(name string) *PodWrapper {
	return &PodWrapper{corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)},
	}}
}

// Obj returns the pod.
func (p *PodWrapper) Obj() *corev1.Pod { return &p.Pod }

// Namespace sets the namespace.
func (p *PodWrapper) Namespace(ns string) *PodWrapper { p.Pod.Namespace = ns; return p }

// UID sets the UID.
func (p *PodWrapper) UID(uid string) *PodWrapper { p.Pod.UID = types.UID(uid); return p }

// GPUMem adds a container "cN" asking units of gpu-mem (limit and request).
func (p *PodWrapper) GPUMem(units int64) *PodWrapper {
	p.Spec.Containers = append(p.Spec.Containers, gpuContainer(fmt.Sprintf("c%d", len(p.Spec.Containers)), units, 0))
	return p
}

// GPUMemCards adds a container asking units split over cards cards.
func (p *PodWrapper) GPUMemCards(units, cards int64) *PodWrapper {
	p.Spec.Containers = append(p.Spec.Containers, gpuContainer(fmt.Sprintf("c%d", len(p.Spec.Containers)), units, cards))
	return p
}

// InitGPUMem adds an init container "iN" asking units of gpu-mem.
func (p *PodWrapper) InitGPUMem(units int64) *PodWrapper {
	p.Spec.InitContainers = append(p.Spec.InitContainers, gpuContainer(fmt.Sprintf("i%d", len(p.Spec.InitContainers)), units, 0))
	return p
}

// InitGPUMemCards adds an init container "iN" asking units of gpu-mem split
// over cards cards.
func (p *PodWrapper) InitGPUMemCards(units, cards int64) *PodWrapper {
	p.Spec.InitContainers = append(p.Spec.InitContainers, gpuContainer(fmt.Sprintf("i%d", len(p.Spec.InitContainers)), units, cards))
	return p
}

// SidecarGPUMem adds a restartable init container (a sidecar) "iN" asking
// units of gpu-mem: it runs beside the init containers after it and the
// app containers.
func (p *PodWrapper) SidecarGPUMem(units int64) *PodWrapper {
	c := gpuContainer(fmt.Sprintf("i%d", len(p.Spec.InitContainers)), units, 0)
	always := corev1.ContainerRestartPolicyAlways
	c.RestartPolicy = &always
	p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	return p
}

// RunAsUser sets the pod's securityContext.runAsUser.
func (p *PodWrapper) RunAsUser(uid int64) *PodWrapper {
	if p.Spec.SecurityContext == nil {
		p.Spec.SecurityContext = &corev1.PodSecurityContext{}
	}
	p.Spec.SecurityContext.RunAsUser = &uid
	return p
}

// ContainerRunAsUser sets securityContext.runAsUser on the app container
// added last.
func (p *PodWrapper) ContainerRunAsUser(uid int64) *PodWrapper {
	c := &p.Spec.Containers[len(p.Spec.Containers)-1]
	if c.SecurityContext == nil {
		c.SecurityContext = &corev1.SecurityContext{}
	}
	c.SecurityContext.RunAsUser = &uid
	return p
}

// Container adds a container without GPU memory.
func (p *PodWrapper) Container(name string) *PodWrapper {
	p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: name, Image: "busybox"})
	return p
}

func gpuContainer(name string, units, cards int64) corev1.Container {
	rl := corev1.ResourceList{gpushare.ResourceGPUMem: *resource.NewQuantity(units, resource.DecimalSI)}
	if cards > 0 {
		rl[gpushare.ResourceGPUCount] = *resource.NewQuantity(cards, resource.DecimalSI)
	}
	return corev1.Container{Name: name, Image: "busybox", Resources: corev1.ResourceRequirements{Limits: rl, Requests: rl.DeepCopy()}}
}

// Requests sets the CPU and memory requests (quantities, e.g. "4", "8Gi")
// of the last container, adding a container "c" if there is none.
func (p *PodWrapper) Requests(cpu, memory string) *PodWrapper {
	if len(p.Spec.Containers) == 0 {
		p.Container("c")
	}
	c := &p.Spec.Containers[len(p.Spec.Containers)-1]
	if c.Resources.Requests == nil {
		c.Resources.Requests = corev1.ResourceList{}
	}
	c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	c.Resources.Requests[corev1.ResourceMemory] = resource.MustParse(memory)
	return p
}

// Node sets spec.nodeName.
func (p *PodWrapper) Node(name string) *PodWrapper { p.Spec.NodeName = name; return p }

// Phase sets status.phase.
func (p *PodWrapper) Phase(ph corev1.PodPhase) *PodWrapper { p.Status.Phase = ph; return p }

// Annotation sets an annotation.
func (p *PodWrapper) Annotation(k, v string) *PodWrapper {
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations[k] = v
	return p
}

// Allocation sets the gpushare allocation annotation.
func (p *PodWrapper) Allocation(a *gpushare.Allocation) *PodWrapper {
	s, err := a.Encode()
	if err != nil {
		panic(err)
	}
	return p.Annotation(gpushare.AnnotationAllocation, s)
}

// NodeWrapper builds a Node.
type NodeWrapper struct{ corev1.Node }

// MakeNode returns a Ready node with 8 CPUs, 32Gi memory and 110 pods.
func MakeNode(name string) *NodeWrapper {
	rl := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &NodeWrapper{corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Status: corev1.NodeStatus{
			Capacity: rl, Allocatable: rl.DeepCopy(),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}},
		},
	}}
}

// Obj returns the node.
func (n *NodeWrapper) Obj() *corev1.Node { return &n.Node }

// Host sets the CPU and memory capacity and allocatable (quantities).
func (n *NodeWrapper) Host(cpu, memory string) *NodeWrapper {
	for _, rl := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		rl[corev1.ResourceCPU] = resource.MustParse(cpu)
		rl[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	return n
}

// Capacity sets gpu-mem and gpu-count capacity and allocatable, without an inventory.
func (n *NodeWrapper) Capacity(mem, count int64) *NodeWrapper {
	for _, rl := range []corev1.ResourceList{n.Status.Capacity, n.Status.Allocatable} {
		rl[gpushare.ResourceGPUMem] = *resource.NewQuantity(mem, resource.DecimalSI)
		rl[gpushare.ResourceGPUCount] = *resource.NewQuantity(count, resource.DecimalSI)
	}
	return n
}

// Cards publishes an inventory of healthy cards with the given sizes (GiB),
// UUIDs "GPU-<node>-<index>", and sets capacity to match.
func (n *NodeWrapper) Cards(model string, sizes ...int64) *NodeWrapper {
	inv := gpushare.Inventory{Unit: gpushare.UnitGiB}
	var total int64
	for i, s := range sizes {
		inv.Devices = append(inv.Devices, gpushare.Device{Index: i, UUID: fmt.Sprintf("GPU-%s-%d", n.Name, i), Model: model, Memory: s, Healthy: true})
		total += s
	}
	return n.Inventory(&inv).Capacity(total, int64(len(sizes)))
}

// Inventory sets the inventory annotation as is.
func (n *NodeWrapper) Inventory(inv *gpushare.Inventory) *NodeWrapper {
	b, err := json.Marshal(inv)
	if err != nil {
		panic(err)
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[gpushare.AnnotationInventory] = string(b)
	return n
}

// Unhealthy marks card index unhealthy in the inventory.
func (n *NodeWrapper) Unhealthy(index int) *NodeWrapper {
	inv, err := gpushare.ParseInventory(n.Annotations[gpushare.AnnotationInventory])
	if err != nil {
		panic(err)
	}
	for i := range inv.Devices {
		if inv.Devices[i].Index == index {
			inv.Devices[i].Healthy = false
		}
	}
	return n.Inventory(inv)
}
