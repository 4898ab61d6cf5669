package cache

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache/internal/view"
)

// touch records that ns changed, so that publish copies it for the
// readers. The caller holds c.mu.
func (c *Cache) touch(ns *nodeState) {
	c.inputsDirty = true
	if !ns.dirty {
		ns.dirty = true
		c.dirty = append(c.dirty, ns)
	}
}

// publish hands the readers a copy of every node changed since the last
// publish, and of the policy's inputs if they changed. Every method that
// changes the cache calls it before it releases c.mu. So a reader sees
// every change that completed before it began. The caller holds c.mu.
func (c *Cache) publish() {
	if len(c.dirty) > 0 || c.inputsDirty || c.workloadDirty {
		c.generation.Add(1)
	}
	for _, ns := range c.dirty {
		ns.dirty = false
		ns.gen++
		name := ns.node.Name
		if cur, ok := c.nodes[name]; !ok || cur != ns || !ns.seen {
			// Deleted, or a placeholder: readers know it not.
			if ns.slot != nil {
				ns.slot.Snap.Store(nil) // dead
				ns.slot = nil
			}
			continue
		}
		if ns.slot != nil {
			ns.slot.Snap.Store(ns.snap(c.pods))
			continue
		}
		ns.slot = &view.Slot{}
		ns.slot.Snap.Store(ns.snap(c.pods))
		c.view.SetIndex(c.view.Index().With(name, ns.slot))
	}
	c.dirty = c.dirty[:0]
	if !c.inputsDirty && !c.workloadDirty {
		return
	}
	in := &view.Inputs{DefaultPolicy: c.policy, Holes: c.holes.Clone(), CPUPerUnit: c.workload.CPUPerUnit(), MaxMilliCPU: c.maxMilliCPU, MaxUnits: c.maxUnits}
	in.Typical, in.Restrictions = c.view.Inputs().Typical, c.view.Inputs().Restrictions
	if c.workloadDirty {
		in.Typical, in.Restrictions = c.workload.Typical(), c.workload.Restrictions()
	}
	in.ModelCosts = allocator.ModelCosts(in.Restrictions, in.Holes)
	c.view.SetInputs(in)
	c.inputsDirty, c.workloadDirty = false, false
}

// Generation counts the changes published so far. Two equal readings mean
// no node, pod or policy input changed in between. It takes no lock.
func (c *Cache) Generation() uint64 { return c.generation.Load() }

// snap copies ns for the readers. When its cards are few, they share the
// copy's allocation, one place in memory to read. The caller holds c.mu.
func (ns *nodeState) snap(pods map[types.UID]*podState) *view.Snap {
	s := &view.Snap{Node: ns.node, Source: ns.source, InvErr: ns.invErr, CordonErr: ns.cordonErr, HostKnown: ns.hostKnown,
		FreeMilliCPU: ns.allocMilliCPU - ns.reqMilliCPU, FreeMemMiB: ns.allocMemMiB - ns.reqMemMiB, Gen: ns.gen, MPSUsers: ns.mpsUsers(pods)}
	s.SetCards(ns.node.Cards)
	return s
}
