package gpushare

import (
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
)

// ErrNoGPUMem is returned by PodDemand for a pod that asks no GPU memory.
var ErrNoGPUMem = errors.New("pod asks no aliyun.com/gpu-mem")

// ContainerDemand is what one container asks.
type ContainerDemand struct {
	Name string
	// Init is true for an init container that runs to completion before the
	// app containers.
	Init bool
	// Units per card, in the node's unit.
	Units int64
	// Cards is how many distinct cards get Units each (≥ 1).
	Cards int
}

// Total is Units × Cards.
func (c ContainerDemand) Total() int64 { return c.Units * int64(c.Cards) }

// Demand is what a pod asks: only its containers with GPU memory, init
// containers first, each list in spec order.
type Demand []ContainerDemand

// Total returns the units a pod needs on a node, under kubelet's rule,
// which the allocator implements. App containers and restartable init
// containers (sidecars) run together, so their demands add. Each plain init
// container runs before the app containers, beside the sidecars declared
// before it: kubelet keeps sidecar devices out of the pool that later
// containers reuse. The pod needs the larger of the sum of all non-init
// containers and, over the plain init containers, the sidecars before one
// plus that one.
// Examples: init 8, apps 4 and 6 → max(8, 10) = 10; sidecar 2, then init 8,
// then app 3 → max(2+3, 2+8) = 10.
//
// A Demand lists the init containers in spec order before the app
// containers; its sidecars are init containers with Init false. So every
// non-init entry before an init entry is a sidecar declared before it.
func (d Demand) Total() int64 {
	var running, initMax int64 // running: non-init units so far
	for _, c := range d {
		if c.Init {
			initMax = max(initMax, running+c.Total())
		} else {
			running += c.Total()
		}
	}
	return max(running, initMax)
}

// MaxPerCard returns the largest Units any single container needs on one card.
func (d Demand) MaxPerCard() int64 {
	var m int64
	for _, c := range d {
		m = max(m, c.Units)
	}
	return m
}

// PodDemand reads a pod's GPU-memory demand from its containers' limits.
// For extended resources requests must equal limits; a request without a
// limit is accepted too. It returns ErrNoGPUMem when no container asks
// gpu-mem. It returns an error naming the container for a non-positive
// amount, a request that differs from its limit, or gpu-mem that gpu-count
// does not divide evenly.
func PodDemand(pod *corev1.Pod) (Demand, error) {
	if pod == nil {
		return nil, errors.New("no pod")
	}
	var d Demand
	for _, c := range pod.Spec.InitContainers {
		restartable := c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		cd, ok, err := containerDemand(&c, !restartable)
		if err != nil {
			return nil, err
		}
		if ok {
			d = append(d, cd)
		}
	}
	for _, c := range pod.Spec.Containers {
		cd, ok, err := containerDemand(&c, false)
		if err != nil {
			return nil, err
		}
		if ok {
			d = append(d, cd)
		}
	}
	if len(d) == 0 {
		return nil, ErrNoGPUMem
	}
	return d, nil
}

func containerDemand(c *corev1.Container, init bool) (ContainerDemand, bool, error) {
	memQ, hasLimit := c.Resources.Limits[ResourceGPUMem]
	reqQ, hasReq := c.Resources.Requests[ResourceGPUMem]
	if !hasLimit && !hasReq {
		return ContainerDemand{}, false, nil
	}
	if !hasLimit {
		memQ = reqQ
	} else if hasReq && reqQ.Cmp(memQ) != 0 {
		return ContainerDemand{}, false, fmt.Errorf("container %q: %s request %s differs from limit %s; extended resources need request == limit",
			c.Name, ResourceGPUMem, reqQ.String(), memQ.String())
	}
	mem, ok := memQ.AsInt64()
	if !ok || mem <= 0 {
		return ContainerDemand{}, false, fmt.Errorf("container %q: %s is %s; want a positive whole number of units", c.Name, ResourceGPUMem, memQ.String())
	}
	cards := int64(1)
	if q, ok := c.Resources.Limits[ResourceGPUCount]; ok {
		n, ok := q.AsInt64()
		if !ok || n <= 0 {
			return ContainerDemand{}, false, fmt.Errorf("container %q: %s is %s; want a positive whole number", c.Name, ResourceGPUCount, q.String())
		}
		cards = n
	}
	if mem%cards != 0 {
		return ContainerDemand{}, false, fmt.Errorf("container %q: %s %d is not divisible by %s %d; each card gets an equal share",
			c.Name, ResourceGPUMem, mem, ResourceGPUCount, cards)
	}
	return ContainerDemand{Name: c.Name, Init: init, Units: mem / cards, Cards: int(cards)}, true, nil
}
