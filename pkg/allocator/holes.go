package allocator

// Holes summarises the cluster's cards for FragAware. For its waste model
// (see Waste) it counts how many partly used cards have each amount of
// memory free, and the free memory overall. For its CPU pressure (see
// FragAware.SetCPUDemand) it holds the CPU free beside the cards. The
// extender's cache and the simulator keep one up to date with AddNode and
// AddHost around every change of a node's cards, CPU and requests. The zero
// value is not ready; use NewHoles. It is not safe for concurrent use.
type Holes struct {
	// Cards: free units → healthy cards with that many units free that
	// are neither empty nor full ("holes").
	Cards map[int64]int
	// FreeUnits is the memory free on all healthy cards, in units.
	FreeUnits int64
	// FreeMilliCPU is the CPU, in millicores, not yet requested on the
	// nodes that have cards and report their CPU (AddHost). The pods still
	// to come share it with the memory of FreeUnits. It may be negative on
	// over-committed nodes. HostNodes counts those nodes. With none, the CPU
	// is unknown, not used up.
	FreeMilliCPU int64
	HostNodes    int
	// FreeByModel is FreeUnits by the cards' model ("" for cards of
	// unknown model), for FragAware's model term (see ModelCosts).
	FreeByModel map[string]int64
}

// NewHoles returns the summary of a cluster without cards.
func NewHoles() *Holes { return &Holes{Cards: map[int64]int{}, FreeByModel: map[string]int64{}} }

// Clone returns a copy of h that shares nothing with it.
func (h *Holes) Clone() *Holes {
	c := *h
	c.Cards = make(map[int64]int, len(h.Cards))
	for k, v := range h.Cards {
		c.Cards[k] = v
	}
	c.FreeByModel = make(map[string]int64, len(h.FreeByModel))
	for k, v := range h.FreeByModel {
		c.FreeByModel[k] = v
	}
	return &c
}

// AddNode adds (sign 1) or takes away (sign −1) n's healthy cards. Call it
// with −1 before changing a node's cards and with 1 after.
func (h *Holes) AddNode(n *Node, sign int) {
	for i := range n.Cards {
		c := &n.Cards[i]
		if !c.Healthy {
			continue
		}
		free := c.Free()
		h.FreeUnits += int64(sign) * free
		if h.FreeByModel == nil {
			h.FreeByModel = map[string]int64{}
		}
		if m := c.Model(); free != 0 {
			if k := h.FreeByModel[m] + int64(sign)*free; k != 0 {
				h.FreeByModel[m] = k
			} else {
				delete(h.FreeByModel, m)
			}
		}
		if free <= 0 || free >= c.Total {
			continue
		}
		if k := h.Cards[free] + sign; k != 0 {
			h.Cards[free] = k
		} else {
			delete(h.Cards, free)
		}
	}
}

// AddHost adds (sign 1) or takes away (sign −1) the free CPU, in
// millicores, of a node that has cards and reports its CPU. As with
// AddNode, call it with −1 before changing the node's CPU, its requests or
// its cards, and with 1 after.
func (h *Holes) AddHost(freeMilliCPU int64, sign int) {
	h.FreeMilliCPU += int64(sign) * freeMilliCPU
	h.HostNodes += sign
}
