package inspect

import (
	"sort"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
)

// Report is everything the plugin shows; -o json and -o yaml print it as is.
// Every amount is in its node's Unit (GiB unless the node's inventory says
// MiB); Totals holds one entry per unit.
type Report struct {
	// Source is where the numbers came from: "api" or "extender <URL>".
	Source string `json:"source"`
	// Namespace, when set, limits the pods listed (not the amounts) to one
	// namespace.
	Namespace string `json:"namespace,omitempty"`
	// Nodes sorted by name.
	Nodes []Node `json:"nodes"`
	// Pending pods ask gpu-mem and are on no node yet; they hold nothing.
	// Only the API source knows them.
	Pending []PendingPod `json:"pending,omitempty"`
	// Totals over Nodes, one per unit, sorted by unit.
	Totals []Total `json:"totals"`
}

// Node is one node's cards.
type Node struct {
	Name string `json:"name"`
	// Address is the node's InternalIP (else ExternalIP), empty when unknown.
	Address string `json:"address,omitempty"`
	Unit    string `json:"unit"`
	// Source of the card list: "inventory" (the device plugin's
	// gpushare.io/devices annotation), "capacity" (aliyun.com/gpu-mem divided
	// evenly over aliyun.com/gpu-count), "dra" (the DRA driver's
	// ResourceSlices; amounts from the allocated ResourceClaims) or "none".
	Source string `json:"source"`
	// InventoryError explains an ignored inventory annotation.
	InventoryError string `json:"inventoryError,omitempty"`
	// CordonError explains an invalid gpushare.io/cordoned-gpus annotation:
	// every card is then cordoned until it is fixed.
	CordonError string `json:"cordonError,omitempty"`
	// CordonedMissing lists the UUIDs the cordon annotation names that no
	// card of the node has.
	CordonedMissing []string `json:"cordonedMissing,omitempty"`
	// Allocated is the sum of the cards' Allocated; Total of their Total.
	Allocated int64  `json:"allocated"`
	Total     int64  `json:"total"`
	Cards     []Card `json:"cards"`
	// Unattributed pods are bound to the node and ask gpu-mem, but carry
	// neither gpushare.io/allocation nor ALIYUN_COM_GPU_MEM_IDX: they were not
	// scheduled through the extender, their card is unknown, and their units
	// are not in Allocated.
	Unattributed []PodShare `json:"unattributed,omitempty"`
	// MissingUnits are held on card indexes the node no longer reports (not
	// in Allocated).
	MissingUnits int64 `json:"missingUnits,omitempty"`
	// Ignored lists pods whose gpushare.io/allocation annotation is not
	// charged, with why: it does not fit the pod's request or the node's
	// cards, or the pod is not bound (only the extender's bind writes it,
	// together with the node). A bound one is charged by its request
	// instead (on ALIYUN_COM_GPU_MEM_IDX's card, else unattributed).
	Ignored []inspectapi.Ignored `json:"ignored,omitempty"`
}

// Card is one GPU.
type Card struct {
	Index     int    `json:"index"`
	UUID      string `json:"uuid,omitempty"`
	Model     string `json:"model,omitempty"`
	Allocated int64  `json:"allocated"`
	Total     int64  `json:"total"`
	// Healthy is false for a card that receives no new pods.
	Healthy bool `json:"healthy"`
	// Cordoned: the operator keeps new pods off the card
	// (gpushare.io/cordoned-gpus); the pods on it stay.
	Cordoned bool `json:"cordoned,omitempty"`
	// Isolation is how the card enforces each pod's share of its memory:
	// driver, mps or none (advisory).
	Isolation gpushare.Isolation `json:"isolation"`
	// Pods holding memory on the card, sorted by namespace and name. With
	// Report.Namespace set, only that namespace's pods.
	Pods []PodShare `json:"pods"`
}

// Mode returns the card's isolation, none when unknown.
func (c *Card) Mode() gpushare.Isolation {
	if c.Isolation == "" {
		return gpushare.IsolationNone
	}
	return c.Isolation
}

// PodShare is what one pod holds on one card (or on a node, when
// unattributed).
type PodShare struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Units     int64  `json:"units"`
	// State is "bound", or "assumed" while the extender's bind is under
	// way; on a DRA node, "reserved" (Name is the pod using the claim) or
	// "allocated" (Name is the claim's: no pod uses it yet).
	State string `json:"state"`
}

// PendingPod asks gpu-mem and is not on a node yet.
type PendingPod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Units the pod needs on its node (gpushare.Demand.Total); 0 when its
	// request is invalid.
	Units int64 `json:"units"`
	// Cards says which cards the pod's gpushare.io/gpu-* annotations allow,
	// e.g. "of model A100*"; empty when it carries none.
	Cards string `json:"cards,omitempty"`
	// Invalid: the pod's request or card annotations are invalid, so no
	// node admits it (Reason says why).
	Invalid bool `json:"invalid,omitempty"`
	// Reason it is pending, e.g. "not yet scheduled" or the scheduler's
	// message.
	Reason string `json:"reason"`
}

// Total is the allocation over all nodes with one unit.
type Total struct {
	Unit      string `json:"unit"`
	Allocated int64  `json:"allocated"`
	Total     int64  `json:"total"`
	// Percent is Allocated/Total rounded down, 0 for an empty total.
	Percent int64 `json:"percent"`
}

// newNode converts the cache's view of a node; address may be empty.
func newNode(v *inspectapi.Node, address string) Node {
	n := Node{
		Name: v.Name, Address: address, Unit: v.Unit, Source: v.Source, InventoryError: v.InventoryError,
		CordonError: v.CordonError, CordonedMissing: v.CordonedMissing, Allocated: v.Used, Total: v.Total, Cards: make([]Card, 0, len(v.Cards)), MissingUnits: v.MissingUnits,
	}
	for _, c := range v.Cards {
		n.Cards = append(n.Cards, Card{Index: c.Index, UUID: c.UUID, Model: c.Model, Allocated: c.Used, Total: c.Total, Healthy: c.Healthy,
			Cordoned: c.Cordoned, Isolation: c.Isolation, Pods: shares(c.Pods)})
	}
	if len(v.Unattributed) > 0 {
		n.Unattributed = shares(v.Unattributed)
	}
	n.Ignored = append(n.Ignored, v.Ignored...)
	return n
}

func shares(pods []inspectapi.Pod) []PodShare {
	out := make([]PodShare, 0, len(pods))
	for _, p := range pods {
		out = append(out, PodShare{Namespace: p.Namespace, Name: p.Name, Units: p.Units, State: p.State})
	}
	return out
}

// interesting reports whether a node belongs in a listing of all nodes: it
// has cards, or something to explain. A node asked for by name is always shown.
func (n *Node) interesting() bool {
	return len(n.Cards) > 0 || len(n.Unattributed) > 0 || n.MissingUnits > 0 || n.InventoryError != "" || len(n.Ignored) > 0 ||
		n.CordonError != "" || len(n.CordonedMissing) > 0
}

// newReport builds a report from the cache's views. With only == "" nodes
// without GPU memory and nothing to explain are left out. address maps
// node name -> address (may be nil).
func newReport(source string, views []inspectapi.Node, only string, address map[string]string, pending []PendingPod) *Report {
	r := &Report{Source: source, Nodes: []Node{}, Pending: pending}
	for i := range views {
		n := newNode(&views[i], address[views[i].Name])
		if only == "" && !n.interesting() {
			continue
		}
		r.Nodes = append(r.Nodes, n)
	}
	sort.Slice(r.Nodes, func(a, b int) bool { return r.Nodes[a].Name < r.Nodes[b].Name })
	sort.Slice(r.Pending, func(a, b int) bool {
		if r.Pending[a].Namespace != r.Pending[b].Namespace {
			return r.Pending[a].Namespace < r.Pending[b].Namespace
		}
		return r.Pending[a].Name < r.Pending[b].Name
	})
	r.Totals = totals(r.Nodes)
	return r
}

// totals sums nodes per unit.
func totals(nodes []Node) []Total {
	byUnit := map[string]*Total{}
	for _, n := range nodes {
		t, ok := byUnit[n.Unit]
		if !ok {
			t = &Total{Unit: n.Unit}
			byUnit[n.Unit] = t
		}
		t.Allocated += n.Allocated
		t.Total += n.Total
	}
	out := make([]Total, 0, len(byUnit))
	for _, t := range byUnit {
		t.Percent = percent(t.Allocated, t.Total)
		out = append(out, *t)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Unit < out[b].Unit })
	return out
}

// percent returns part/whole in whole percent, rounded down: 9 of 30 is 30,
// 1 of 3 is 33; 0 when whole is 0.
func percent(part, whole int64) int64 {
	if whole <= 0 {
		return 0
	}
	return part * 100 / whole
}

// onlyNamespace drops pods of other namespaces from the listings; the
// amounts stay whole. An empty ns keeps everything.
func (r *Report) onlyNamespace(ns string) {
	if ns == "" {
		return
	}
	r.Namespace = ns
	keep := func(pods []PodShare) []PodShare {
		out := pods[:0]
		for _, p := range pods {
			if p.Namespace == ns {
				out = append(out, p)
			}
		}
		return out
	}
	for i := range r.Nodes {
		n := &r.Nodes[i]
		for j := range n.Cards {
			n.Cards[j].Pods = keep(n.Cards[j].Pods)
		}
		if n.Unattributed = keep(n.Unattributed); len(n.Unattributed) == 0 {
			n.Unattributed = nil
		}
		ignored := n.Ignored[:0]
		for _, ig := range n.Ignored {
			if ig.Namespace == ns {
				ignored = append(ignored, ig)
			}
		}
		if n.Ignored = ignored; len(n.Ignored) == 0 {
			n.Ignored = nil
		}
	}
	pending := r.Pending[:0]
	for _, p := range r.Pending {
		if p.Namespace == ns {
			pending = append(pending, p)
		}
	}
	if r.Pending = pending; len(r.Pending) == 0 {
		r.Pending = nil
	}
}
