package cache

import (
	"cmp"
	"slices"

	"github.com/gpushare/gpushare/pkg/inspectapi"
)

// Inspect returns every node, or only the named one (ok is false if it is
// unknown). Nodes are sorted by name, cards by index, pods by
// namespace/name.
func (c *Cache) Inspect(only string) (views []inspectapi.Node, ok bool) {
	if views, ok = c.views(only); !ok {
		return nil, false
	}
	// The views share nothing with the cache: sort them without the lock.
	slices.SortFunc(views, func(a, b inspectapi.Node) int { return cmp.Compare(a.Name, b.Name) })
	for i := range views {
		for j := range views[i].Cards {
			sortPods(views[i].Cards[j].Pods)
		}
		sortPods(views[i].Unattributed)
		slices.SortFunc(views[i].Ignored, func(a, b inspectapi.Ignored) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
	}
	return views, true
}

// views copies every node, or only the named one (ok is false if it is
// unknown), into views, unsorted.
func (c *Cache) views(only string) (views []inspectapi.Node, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pending := map[string][]inspectapi.Ignored{} // node -> pending pods naming it
	for _, ip := range c.pendingIgnored {
		if only == "" || ip.node == only {
			pending[ip.node] = append(pending[ip.node], inspectapi.Ignored{Namespace: ip.namespace, Name: ip.name, Reason: ip.reason})
		}
	}
	if only != "" {
		ns, found := c.nodes[only]
		if !found {
			return nil, false
		}
		return []inspectapi.Node{c.nodeView(ns, pending[only])}, true
	}
	views = make([]inspectapi.Node, 0, len(c.nodes))
	for name, ns := range c.nodes {
		views = append(views, c.nodeView(ns, pending[name]))
	}
	return views, true
}

// nodeView copies ns into a view, its pods unsorted. pending are the
// pending pods whose ignored annotation names the node. The caller holds
// c.mu.
func (c *Cache) nodeView(ns *nodeState, pending []inspectapi.Ignored) inspectapi.Node {
	v := inspectapi.Node{Name: ns.node.Name, Unit: ns.node.Unit, Source: ns.source, InventoryError: ns.invErr, CordonError: ns.cordonErr,
		CordonedMissing: slices.Clone(ns.cordonMissing), MissingUnits: ns.missing, Cards: []inspectapi.Card{}, Ignored: pending}
	for i := range ns.node.Cards {
		card := &ns.node.Cards[i]
		v.Total += card.Total
		v.Used += card.Used
		v.Cards = append(v.Cards, inspectapi.Card{Index: card.Index, UUID: card.UUID(), Model: card.Model(), Total: card.Total, Used: card.Used,
			Healthy: card.Healthy, Cordoned: card.Cordoned, Isolation: card.Isolation(), Pods: []inspectapi.Pod{}})
	}
	for uid := range ns.pods {
		ps := c.pods[uid]
		for _, cu := range ps.perCard {
			if pos := ns.position(cu.Index); pos >= 0 {
				v.Cards[pos].Pods = append(v.Cards[pos].Pods, inspectapi.Pod{Namespace: ps.namespace, Name: ps.name, Units: cu.Units, State: string(ps.state)})
			}
		}
		if ps.unattributed > 0 {
			v.Unattributed = append(v.Unattributed, inspectapi.Pod{Namespace: ps.namespace, Name: ps.name, Units: ps.unattributed, State: string(ps.state)})
		}
		if reason := ps.ignored(); reason != "" {
			v.Ignored = append(v.Ignored, inspectapi.Ignored{Namespace: ps.namespace, Name: ps.name, Reason: reason})
		}
	}
	return v
}

func sortPods(p []inspectapi.Pod) {
	slices.SortFunc(p, func(a, b inspectapi.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}
