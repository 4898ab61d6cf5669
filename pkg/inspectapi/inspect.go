package inspectapi

import "github.com/gpushare/gpushare/pkg/gpushare"

// Result is the body of GET /inspect and /inspect/:node.
type Result struct {
	Nodes []Node `json:"nodes"`
	// DefaultPolicy is the extender's scoring policy.
	DefaultPolicy string `json:"defaultPolicy"`
}

// Node is one node as GET /inspect shows it. Units are the node's Unit.
type Node struct {
	Name string `json:"name"`
	Unit string `json:"unit"`
	// Source of the card list: "inventory", "capacity" or "none".
	Source string `json:"source"`
	// InventoryError explains an ignored inventory annotation.
	InventoryError string `json:"inventoryError,omitempty"`
	// CordonError explains an invalid gpushare.io/cordoned-gpus annotation.
	// Every card is then cordoned until it is fixed.
	CordonError string `json:"cordonError,omitempty"`
	// CordonedMissing lists UUIDs the cordon annotation names that no card of
	// the node has: a typo, or a card since removed.
	CordonedMissing []string `json:"cordonedMissing,omitempty"`
	Total           int64    `json:"total"`
	Used            int64    `json:"used"`
	Cards           []Card   `json:"cards"`
	// Unattributed lists pods on the node asking gpu-mem that were not
	// placed by the extender and name no card.
	Unattributed []Pod `json:"unattributed,omitempty"`
	// MissingUnits are held on card indexes the node no longer reports.
	MissingUnits int64 `json:"missingUnits,omitempty"`
	// Ignored lists pods whose allocation annotation the extender does not
	// charge: it did not choose it, and it does not fit the pod's request or
	// the node's cards. They are bound pods on this node, charged by their
	// request instead, and pending pods whose annotation names this node.
	Ignored []Ignored `json:"ignored,omitempty"`
}

// Where a node's card list came from (Node.Source).
const (
	SourceInventory = "inventory" // the device plugin's gpushare.io/devices annotation
	SourceCapacity  = "capacity"  // aliyun.com/gpu-mem ÷ aliyun.com/gpu-count
	SourceDRA       = "dra"       // the gpushare DRA driver's ResourceSlice (cache.Cache.SetDRANode)
	SourceNone      = "none"      // the node reports no GPU memory
)

// Ignored is a pod whose allocation annotation is ignored, and why.
type Ignored struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Reason    string `json:"reason"`
}

// Card is one card.
type Card struct {
	Index   int    `json:"index"`
	UUID    string `json:"uuid,omitempty"`
	Model   string `json:"model,omitempty"`
	Total   int64  `json:"total"`
	Used    int64  `json:"used"`
	Healthy bool   `json:"healthy"`
	// Cordoned: the operator keeps new pods off the card
	// (gpushare.io/cordoned-gpus). Pods on it keep what they hold.
	Cordoned bool `json:"cordoned,omitempty"`
	// Isolation is how the card enforces each pod's share: driver, mps or
	// none. None is advisory; a node without an inventory shows it too.
	Isolation gpushare.Isolation `json:"isolation"`
	Pods      []Pod              `json:"pods"`
}

// Pod is one pod's share of a card, or of a node when unattributed.
type Pod struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Units     int64  `json:"units"`
	// State is the cache's state of the pod's allocation (cache.State):
	// assumed, bound or reserved.
	State string `json:"state"`
}
