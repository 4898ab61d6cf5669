package cache

import (
	"cmp"
	"errors"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// SetNode adds or updates a node. Its error reports an ignored inventory
// annotation, an invalid gpushare.io/cordoned-gpus annotation, or both. The
// node is still updated, from its capacity in the first case, with every
// card cordoned in the second.
func (c *Cache) SetNode(node *corev1.Node) error { return c.SetNodeInfo(kubeinfo.NewNodeInfo(node)) }

// SetNodeInfo is SetNode for what the node informer keeps of a node.
func (c *Cache) SetNodeInfo(node *kubeinfo.NodeInfo) error {
	in := nodeInput{name: node.Name}
	in.unit, in.cards, in.source, in.invErr = nodeCards(node)
	in.cpu, in.mem, in.hostKnown = node.Host()
	c.report(c.locked(func() []inspectapi.Ignored {
		if d := c.draNodes[node.Name]; d != nil && (in.source == inspectapi.SourceNone || gpuMem(node) <= 0) {
			// The driver's slice wins over the device plugin's inventory
			// and capacity unless the plugin serves the node. A node that
			// moved to DRA keeps them, as nothing removes them, but kubelet
			// reports no allocatable aliyun.com/gpu-mem once the plugin is
			// gone. One that moved back keeps the driver's slice for 30 s.
			in.unit, in.cards, in.source, in.invErr = d.unit, slices.Clone(d.cards), inspectapi.SourceDRA, nil
		}
		in.cordonMissing, in.cordonErr = cordonCards(node, in.cards)
		c.nodeState(node.Name).info = node
		newly := c.setNode(&in)
		c.publish()
		return newly
	}))
	return errors.Join(in.invErr, in.cordonErr)
}

// gpuMem is node's allocatable (else capacity) aliyun.com/gpu-mem.
func gpuMem(node *kubeinfo.NodeInfo) int64 {
	mem, _ := node.GPUs()
	return mem
}

// draNode is what the gpushare DRA driver publishes for a node.
type draNode struct {
	// unit of the cards' Total: the node's request step.
	unit string
	// cards, ordered by Index; each card's Rank is its place in the slice.
	cards []allocator.Card
}

// SetDRANode records the cards the gpushare DRA driver publishes for node
// in its ResourceSlice, or forgets them when cards is empty. unit is the
// node's, and each card's Rank its place in the slice. Once the node
// informer has shown the node, it takes these cards (source SourceDRA) in
// place of the device plugin's, unless the plugin serves the node (see
// SetNodeInfo). The node's cordon annotation applies to them. UpsertClaim
// charges the pods whose claims hold memory there. The device plugin's pods
// still running there are not charged: the slice already leaves out what
// they hold.
func (c *Cache) SetDRANode(node, unit string, cards []allocator.Card) error {
	cards = slices.Clone(cards)
	slices.SortFunc(cards, func(a, b allocator.Card) int { return cmp.Compare(a.Index, b.Index) })
	info := c.setDRACards(node, unit, cards)
	if info == nil {
		return nil // SetNodeInfo takes them when the node comes
	}
	return c.SetNodeInfo(info)
}

// setDRACards records node's cards for SetDRANode and returns what the
// node informer last gave of the node, nil when it has not shown it.
func (c *Cache) setDRACards(node, unit string, cards []allocator.Card) *kubeinfo.NodeInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(cards) == 0 {
		delete(c.draNodes, node)
	} else {
		c.draNodes[node] = &draNode{unit: unit, cards: cards}
	}
	if ns, ok := c.nodes[node]; ok {
		return ns.info
	}
	return nil
}

// nodeInput is what SetNode reads of a node.
type nodeInput struct {
	name, unit, source string
	cards              []allocator.Card
	// invErr: an ignored inventory annotation. cordonErr: an invalid cordon
	// annotation. cordonMissing: the UUIDs it names that no card has.
	invErr, cordonErr error
	cordonMissing     []string
	// cpu (millicores) and mem (MiB): allocatable. hostKnown: the node
	// reports its CPU.
	cpu, mem  int64
	hostKnown bool
}

// setNode applies SetNode under c.mu and returns the pods whose allocation
// annotation the node's new cards make it ignore.
func (c *Cache) setNode(in *nodeInput) []inspectapi.Ignored {
	ns := c.nodeState(in.name)
	ns.seen = true
	c.touch(ns)
	oldCPU, oldUnits := ns.allocMilliCPU, ns.node.Capacity()
	c.holes.AddNode(&ns.node, -1)
	c.addHost(ns, -1)
	ns.node = allocator.Node{Name: in.name, Unit: in.unit, Cards: in.cards}
	ns.source = in.source
	ns.hostKnown, ns.allocMilliCPU, ns.allocMemMiB = in.hostKnown, in.cpu, in.mem
	c.updateMax(oldCPU, oldUnits, in.cpu, ns.node.Capacity())
	ns.invErr, ns.cordonErr = "", ""
	if in.invErr != nil {
		ns.invErr = in.invErr.Error()
	}
	if in.cordonErr != nil {
		ns.cordonErr = in.cordonErr.Error()
	}
	ns.cordonMissing = in.cordonMissing
	ns.missing, ns.unattributed = 0, 0
	var newly []inspectapi.Ignored
	for uid := range ns.pods {
		ps := c.pods[uid]
		if !ps.ours {
			was := ps.ignored()
			ns.resolve(ps)
			if now := ps.ignored(); now != "" && now != was {
				newly = append(newly, inspectapi.Ignored{Namespace: ps.namespace, Name: ps.name, Reason: now})
			}
		}
		ns.charge(ps, 1)
	}
	c.holes.AddNode(&ns.node, 1)
	c.addHost(ns, 1)
	return newly
}

// locked runs f under c.mu and returns what f returns: the annotations a
// mutator made ignored. The caller reports them once c.mu is released.
func (c *Cache) locked(f func() []inspectapi.Ignored) []inspectapi.Ignored {
	c.mu.Lock()
	defer c.mu.Unlock()
	return f()
}

// report passes newly ignored annotations to Config.OnIgnored. The caller
// does not hold c.mu.
func (c *Cache) report(newly []inspectapi.Ignored) {
	if c.onIgnored == nil {
		return
	}
	for _, v := range newly {
		c.onIgnored(v)
	}
}

// DeleteNode forgets a node's cards and CPU. Pods still on it stay known,
// the node kept as a placeholder without cards, so they are charged again
// if the node comes back.
func (c *Cache) DeleteNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	ns, ok := c.nodes[name]
	if !ok {
		return
	}
	c.touch(ns)
	c.holes.AddNode(&ns.node, -1) // a node without cards adds nothing back
	c.addHost(ns, -1)
	oldCPU, oldUnits := ns.allocMilliCPU, ns.node.Capacity()
	if len(ns.pods) == 0 && ns.hostPods == 0 {
		delete(c.nodes, name)
	} else {
		ns.seen, ns.node.Cards, ns.source, ns.invErr, ns.info = false, nil, inspectapi.SourceNone, "", nil
		ns.cordonErr, ns.cordonMissing = "", nil
		ns.hostKnown, ns.allocMilliCPU, ns.allocMemMiB = false, 0, 0
		ns.missing, ns.unattributed = 0, 0
		for uid := range ns.pods {
			ns.charge(c.pods[uid], 1) // all of it lands in missing
		}
	}
	c.updateMax(oldCPU, oldUnits, 0, 0)
}

// nodeState returns name's state. For a node not seen yet it adds an empty
// placeholder (no cards, source none): pod events may come before the
// node's, and SetNode charges the pods already recorded. The caller holds
// c.mu.
func (c *Cache) nodeState(name string) *nodeState {
	ns, ok := c.nodes[name]
	if !ok {
		ns = &nodeState{pods: map[types.UID]struct{}{}, source: inspectapi.SourceNone, node: allocator.Node{Name: name, Unit: gpushare.DefaultUnit}}
		c.nodes[name] = ns
	}
	return ns
}

// updateMax keeps maxMilliCPU and maxUnits in step after one node's
// allocatable CPU and GPU capacity went from oldCPU and oldUnits to cpu and
// units. It scans every node only when the node held a maximum and shrank.
// The caller holds c.mu.
func (c *Cache) updateMax(oldCPU, oldUnits, cpu, units int64) {
	if cpu < oldCPU && oldCPU == c.maxMilliCPU || units < oldUnits && oldUnits == c.maxUnits {
		c.rescanMax()
		return
	}
	c.maxMilliCPU, c.maxUnits = max(c.maxMilliCPU, cpu), max(c.maxUnits, units)
}

// rescanMax recomputes maxMilliCPU and maxUnits. The caller holds c.mu.
func (c *Cache) rescanMax() {
	c.maxMilliCPU, c.maxUnits = 0, 0
	for _, ns := range c.nodes {
		c.maxMilliCPU = max(c.maxMilliCPU, ns.allocMilliCPU)
		c.maxUnits = max(c.maxUnits, ns.node.Capacity())
	}
}

// gpuNode returns name's state if the node has cards and takes new pods.
// Otherwise it returns nil and why not; unknown is true for a node the
// extender has not seen, or only as a placeholder. The caller holds c.mu.
func (c *Cache) gpuNode(name string) (ns *nodeState, reason string, unknown bool) {
	ns, ok := c.nodes[name]
	switch {
	case !ok || !ns.seen:
		return nil, "node unknown to the gpushare extender (not yet in its informer cache)", true
	case len(ns.node.Cards) == 0:
		reason := "node reports no GPU memory (" + string(gpushare.ResourceGPUMem) + ")"
		if ns.invErr != "" {
			reason += "; " + ns.invErr
		}
		return nil, reason, false
	case ns.cordonErr != "":
		return nil, ns.cordonErr, false
	}
	return ns, "", false
}
