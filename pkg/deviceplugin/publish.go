package deviceplugin

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Publisher keeps the node's inventory annotation (gpushare.io/devices)
// and its aliyun.com/gpu-count capacity current. kubelet reports
// aliyun.com/gpu-mem itself, from ListAndWatch.
type Publisher struct {
	API  NodeAPI
	Node string
	Unit string
	// Cards in index order.
	Cards []Card

	mu sync.Mutex
	// unhealthy: UUIDs of the cards currently unhealthy.
	unhealthy map[string]bool
}

// SetHealth records which cards are unhealthy; the next Publish shows it.
func (p *Publisher) SetHealth(unhealthy map[string]bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unhealthy = unhealthy
}

// Inventory returns the inventory to publish.
func (p *Publisher) Inventory() *gpushare.Inventory {
	p.mu.Lock()
	defer p.mu.Unlock()
	inv := &gpushare.Inventory{Unit: p.Unit}
	for _, c := range p.Cards {
		inv.Devices = append(inv.Devices, gpushare.Device{Index: c.Index, UUID: c.UUID, Model: c.Model, Memory: c.Units, Healthy: !p.unhealthy[c.UUID], Isolation: c.Isolation})
	}
	return inv
}

// Publish patches the node where its inventory annotation or gpu-count
// capacity differ from what they should be.
func (p *Publisher) Publish(ctx context.Context) error {
	node, err := p.API.GetNode(ctx, p.Node)
	if err != nil {
		return fmt.Errorf("reading node %s: %w", p.Node, err)
	}
	inv, err := p.Inventory().Encode()
	if err != nil {
		return err
	}
	if node.Annotations[gpushare.AnnotationInventory] != inv {
		if err := p.API.PatchNodeAnnotation(ctx, p.Node, gpushare.AnnotationInventory, inv); err != nil {
			return fmt.Errorf("publishing the inventory of node %s: %w", p.Node, err)
		}
	}
	count := strconv.Itoa(len(p.Cards))
	c, okC := node.Status.Capacity[gpushare.ResourceGPUCount]
	a, okA := node.Status.Allocatable[gpushare.ResourceGPUCount]
	if !okC || !okA || c.String() != count || a.String() != count {
		if err := p.API.PatchNodeCapacity(ctx, p.Node, map[corev1.ResourceName]string{gpushare.ResourceGPUCount: count}); err != nil {
			return fmt.Errorf("publishing %s of node %s: %w", gpushare.ResourceGPUCount, p.Node, err)
		}
	}
	return nil
}
