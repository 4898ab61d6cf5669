package workload

import (
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// restricted is one restriction as Workload learns it: the decayed units
// its pods asked, on the scale of Workload.demandUnits.
type restricted struct {
	key              string // restrictionKey
	models, excluded []string
	units            float64
}

// maxRestrictions bounds the restrictions a Workload keeps; the lightest
// goes first.
const maxRestrictions = 32

// restrictionKey names the models cc restricts a pod to; "" when it
// restricts none.
func restrictionKey(cc *gpushare.CardConstraints) string {
	if cc == nil || !cc.ReadsModel() {
		return ""
	}
	return strings.Join(cc.Models, "|") + "!" + strings.Join(cc.ExcludedModels, "|")
}

// ObserveConstrained is ObservePod for a pod whose cards cc constrains
// (nil: none). A pod restricted to some GPU models adds its units to its
// restriction (see Restrictions).
func (w *Workload) ObserveConstrained(d gpushare.Demand, cc *gpushare.CardConstraints, milliCPU, memMiB int64) {
	w.ObservePod(d, milliCPU, memMiB)
	key := restrictionKey(cc)
	if key == "" {
		return
	}
	if w.restricted == nil {
		w.restricted = map[string]*restricted{}
	}
	r := w.restricted[key]
	if r == nil {
		r = &restricted{key: key, models: slices.Clone(cc.Models), excluded: slices.Clone(cc.ExcludedModels)}
		w.restricted[key] = r
	}
	r.units += float64(d.Total())
	if len(w.restricted) > maxRestrictions {
		lightest, lu := "", math.Inf(1)
		for k, v := range w.restricted {
			if v.units < lu || v.units == lu && k < lightest {
				lightest, lu = k, v.units
			}
		}
		delete(w.restricted, lightest)
	}
}

// decayRestricted decays the restrictions' units as observeDemand decays
// demandUnits.
func (w *Workload) decayRestricted() {
	for _, r := range w.restricted {
		r.units *= workloadDecay
	}
}

// Restrictions returns the restrictions of recent pods with their shares
// of recent GPU memory, largest first (ties by models). Empty when no pod
// was restricted to a model.
func (w *Workload) Restrictions() []allocator.Restriction {
	if w.demandUnits <= 0 || len(w.restricted) == 0 {
		return nil
	}
	rs := make([]*restricted, 0, len(w.restricted))
	for _, r := range w.restricted {
		if r.units > 0 {
			rs = append(rs, r)
		}
	}
	sort.Slice(rs, func(a, b int) bool {
		if rs[a].units != rs[b].units {
			return rs[a].units > rs[b].units
		}
		return rs[a].key < rs[b].key
	})
	out := make([]allocator.Restriction, len(rs))
	for i, r := range rs {
		out[i] = allocator.Restriction{Models: r.models, ExcludedModels: r.excluded, Share: min(1, r.units/w.demandUnits)}
	}
	return out
}
