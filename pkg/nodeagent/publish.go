package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
)

// NodeAPI is the part of the node API the publisher uses.
type NodeAPI interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// PatchNodeMetadata sets labels and annotations of the node in one
	// patch, or removes those whose value is nil.
	PatchNodeMetadata(ctx context.Context, name string, labels, annotations map[string]*string) error
	// PatchNodeCapacity sets status capacity and allocatable of resources;
	// a nil value removes the resource.
	PatchNodeCapacity(ctx context.Context, name string, values map[corev1.ResourceName]*string) error
}

// Publisher keeps current the node's inventory annotation,
// gpushare.io/devices, and its labels that describe the cards (labels.go,
// docs/reference/node-labels.md). It keeps the node free of an
// aliyun.com/gpu-count capacity. kubelet reports aliyun.com/gpu-mem itself,
// from ListAndWatch. A card count in the node's capacity would make
// kubelet's admission count pods' gpu-count requests against it: a 4-card
// node would admit two 2-card pods whatever memory is free. The extender
// checks card counts against each card's memory, and the shipped scheduler
// configuration marks gpu-count ignoredByScheduler, so nothing needs it
// published. Aliyun's plugin publishes it, as older versions of this one
// did, so Publish removes it.
type Publisher struct {
	API  NodeAPI
	Node string
	Unit string
	// Cards in index order.
	Cards []handoff.Card
	// Driver is what the node's driver states; nil when it states none
	// (a fake node without --fake-driver).
	Driver *gpu.Driver

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

// Publish patches the node where its inventory annotation or its labels
// differ from what they should be, in one patch, and removes a gpu-count
// capacity.
func (p *Publisher) Publish(ctx context.Context) error {
	node, err := p.API.GetNode(ctx, p.Node)
	if err != nil {
		return fmt.Errorf("reading node %s: %w", p.Node, err)
	}
	inv, err := p.Inventory().Encode()
	if err != nil {
		return err
	}
	p.mu.Lock()
	own, nvidia := nodeLabels(p.Cards, p.unhealthy, p.Driver)
	p.mu.Unlock()
	labels, annotations := labelPatch(node, own, nvidia)
	if node.Annotations[gpushare.AnnotationInventory] != inv {
		annotations[gpushare.AnnotationInventory] = &inv
	}
	if len(labels)+len(annotations) > 0 {
		if err := p.API.PatchNodeMetadata(ctx, p.Node, labels, annotations); err != nil {
			return fmt.Errorf("publishing the inventory and labels of node %s: %w", p.Node, err)
		}
	}
	_, inCapacity := node.Status.Capacity[gpushare.ResourceGPUCount]
	_, inAllocatable := node.Status.Allocatable[gpushare.ResourceGPUCount]
	if inCapacity || inAllocatable {
		if err := p.API.PatchNodeCapacity(ctx, p.Node, map[corev1.ResourceName]*string{gpushare.ResourceGPUCount: nil}); err != nil {
			return fmt.Errorf("removing %s from node %s: %w", gpushare.ResourceGPUCount, p.Node, err)
		}
	}
	return nil
}

// publishPeriod is how often the node's inventory is re-asserted.
const publishPeriod = time.Minute

// Run publishes at start, on request (now) and every publishPeriod,
// retrying failures with backoff, until ctx ends.
func (p *Publisher) Run(ctx context.Context, now <-chan struct{}) {
	logger := klog.FromContext(ctx)
	backoff := time.Second
	for {
		wait := publishPeriod
		if err := p.Publish(ctx); err != nil {
			if errors.Is(err, context.Canceled) {
				return
			}
			logger.Error(err, "Publishing the node inventory; retrying", "in", backoff)
			wait, backoff = backoff, min(2*backoff, publishPeriod)
		} else {
			backoff = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-now:
		case <-time.After(wait):
		}
	}
}
