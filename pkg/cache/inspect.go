package cache

import (
	"cmp"
	"slices"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// NodeView is one node as GET /inspect shows it. Units are the node's Unit.
type NodeView struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Source of the card list: "inventory", "capacity" or "none".
	Source string `json:"source"`
	// InventoryError explains an ignored inventory annotation.
	InventoryError string `json:"inventoryError,omitempty"`
	// CordonError explains an invalid gpushare.io/cordoned-gpus
	// annotation: every card is then cordoned until it is fixed.
	CordonError string `json:"cordonError,omitempty"`
	// CordonedMissing lists UUIDs the cordon annotation names that no
	// card of the node has (a typo, or a card since removed).
	CordonedMissing []string   `json:"cordonedMissing,omitempty"`
	Total           int64      `json:"total"`
	Used            int64      `json:"used"`
	Cards           []CardView `json:"cards"`
	// Unattributed lists pods on the node asking gpu-mem that were not
	// placed by the extender and name no card.
	Unattributed []PodView `json:"unattributed,omitempty"`
	// MissingUnits are held on card indexes the node no longer reports.
	MissingUnits int64 `json:"missingUnits,omitempty"`
	// Ignored lists pods whose allocation annotation the extender does not
	// charge (it did not choose it and it does not fit the pod's request
	// or the node's cards): bound pods on this node, charged by their
	// request instead, and pending pods whose annotation names this node.
	Ignored []IgnoredView `json:"ignored,omitempty"`
}

// IgnoredView is a pod whose allocation annotation is ignored, and why.
type IgnoredView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Reason    string `json:"reason"`
}

// CardView is one card.
type CardView struct {
	Index   int    `json:"index"`
	UUID    string `json:"uuid,omitempty"`
	Model   string `json:"model,omitempty"`
	Total   int64  `json:"total"`
	Used    int64  `json:"used"`
	Healthy bool   `json:"healthy"`
	// Cordoned: the operator keeps new pods off the card
	// (gpushare.io/cordoned-gpus); pods on it keep what they hold.
	Cordoned bool `json:"cordoned,omitempty"`
	// Isolation is how the card enforces each pod's share: driver, mps or
	// none (advisory; also a node without an inventory).
	Isolation gpushare.Isolation `json:"isolation"`
	Pods      []PodView          `json:"pods"`
}

// PodView is one pod's share of a card (or of a node, when unattributed).
type PodView struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Units     int64  `json:"units"`
	State     State  `json:"state"`
}

// Inspect returns every node (or only the named one; ok is false if it is
// unknown), sorted by name, cards by index, pods by namespace/name.
func (c *Cache) Inspect(only string) (views []NodeView, ok bool) {
	if views, ok = c.views(only); !ok {
		return nil, false
	}
	// The views share nothing with the cache: sort them without the lock.
	slices.SortFunc(views, func(a, b NodeView) int { return cmp.Compare(a.Name, b.Name) })
	for i := range views {
		for j := range views[i].Cards {
			sortPods(views[i].Cards[j].Pods)
		}
		sortPods(views[i].Unattributed)
		slices.SortFunc(views[i].Ignored, func(a, b IgnoredView) int {
			return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
		})
	}
	return views, true
}

// views copies every node (or only the named one; ok is false if it is
// unknown) into views, unsorted.
func (c *Cache) views(only string) (views []NodeView, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pending := map[string][]IgnoredView{} // node -> pending pods naming it
	for _, ip := range c.pendingIgnored {
		if only == "" || ip.node == only {
			pending[ip.node] = append(pending[ip.node], IgnoredView{Namespace: ip.namespace, Name: ip.name, Reason: ip.reason})
		}
	}
	if only != "" {
		ns, found := c.nodes[only]
		if !found {
			return nil, false
		}
		return []NodeView{c.nodeView(ns, pending[only])}, true
	}
	views = make([]NodeView, 0, len(c.nodes))
	for name, ns := range c.nodes {
		views = append(views, c.nodeView(ns, pending[name]))
	}
	return views, true
}

// nodeView copies ns into a view, its pods unsorted; pending are the
// pending pods whose ignored annotation names the node. The caller holds
// c.mu.
func (c *Cache) nodeView(ns *nodeState, pending []IgnoredView) NodeView {
	v := NodeView{Name: ns.node.Name, Unit: ns.node.Unit, Source: ns.source, InventoryError: ns.invErr, CordonError: ns.cordonErr,
		CordonedMissing: slices.Clone(ns.cordonMissing), MissingUnits: ns.missing, Cards: []CardView{}, Ignored: pending}
	for i := range ns.node.Cards {
		card := &ns.node.Cards[i]
		v.Total += card.Total
		v.Used += card.Used
		v.Cards = append(v.Cards, CardView{Index: card.Index, UUID: card.UUID(), Model: card.Model(), Total: card.Total, Used: card.Used,
			Healthy: card.Healthy, Cordoned: card.Cordoned, Isolation: card.Isolation(), Pods: []PodView{}})
	}
	for uid := range ns.pods {
		ps := c.pods[uid]
		for _, cu := range ps.perCard {
			if pos := ns.position(cu.idx); pos >= 0 {
				v.Cards[pos].Pods = append(v.Cards[pos].Pods, PodView{Namespace: ps.namespace, Name: ps.name, Units: cu.units, State: ps.state})
			}
		}
		if ps.unattributed > 0 {
			v.Unattributed = append(v.Unattributed, PodView{Namespace: ps.namespace, Name: ps.name, Units: ps.unattributed, State: ps.state})
		}
		if reason := ps.ignored(); reason != "" {
			v.Ignored = append(v.Ignored, IgnoredView{Namespace: ps.namespace, Name: ps.name, Reason: reason})
		}
	}
	return v
}

func sortPods(p []PodView) {
	slices.SortFunc(p, func(a, b PodView) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
}
