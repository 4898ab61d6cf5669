package allocator

import (
	"math"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// A Restriction is a set of GPU models that recent pods were restricted to
// (their gpushare.io/gpu-models and gpu-exclude-models annotations, openb's
// gpu_spec), with its share of the GPU memory recent pods asked.
type Restriction struct {
	// Models and ExcludedModels are model patterns, as in
	// gpushare.CardConstraints.
	Models, ExcludedModels []string
	// Share is the part of the GPU memory (units) recent pods asked that
	// these pods asked, in (0, 1].
	Share float64
}

// allows reports whether a card of model may take the restriction's pods.
// A card of unknown model ("") takes none of them, as Exclude has it.
func (r *Restriction) allows(model string) bool {
	if model == "" {
		return false
	}
	cc := gpushare.CardConstraints{Models: r.Models, ExcludedModels: r.ExcludedModels}
	ok, _ := cc.AllowsModel(model)
	return ok
}

// ModelCosts returns, for each GPU model with free memory in holes, the
// chance that a unit of its free memory is one that pods restricted to
// some models will need: the restricted demand to come that may use the
// model, over the free memory it may use, at most 1.
//
// Of the memory still to be asked (holes.FreeUnits, as the waste model
// reckons), a share r.Share is restricted to r's models, whose free memory
// is A_r. So a unit of model X's free memory is wanted by
//
//	p_X = min(1, Σ_{r allows X} r.Share · FreeUnits / A_r)
//
// restricted units. Example: a quarter of recent memory restricted to T4,
// 10,000 units free in the cluster of which 2,000 on T4s: p_T4 =
// min(1, 0.25·10,000/2,000) = 1, and every T4 unit a pod of another kind
// takes is a unit a T4-only pod will miss. Nil when no restriction or no
// model is known.
func ModelCosts(rs []Restriction, holes *Holes) map[string]float64 {
	if len(rs) == 0 || holes == nil || holes.FreeUnits <= 0 || len(holes.FreeByModel) == 0 {
		return nil
	}
	allowed := make([]float64, len(rs)) // A_r
	for model, free := range holes.FreeByModel {
		for i := range rs {
			if free > 0 && rs[i].allows(model) {
				allowed[i] += float64(free)
			}
		}
	}
	costs := make(map[string]float64, len(holes.FreeByModel))
	for model, free := range holes.FreeByModel {
		if free <= 0 || model == "" {
			continue
		}
		var p float64
		for i := range rs {
			if allowed[i] > 0 && rs[i].allows(model) {
				p += rs[i].Share * float64(holes.FreeUnits) / allowed[i]
			}
		}
		if p > 0 {
			costs[model] = min(1, p)
		}
	}
	if len(costs) == 0 {
		return nil
	}
	return costs
}

// modelWeight is the weight of a restricted unit expected lost, against
// wasteWeight for a unit of expected waste (see SetModels). The sweep that
// chose it is in docs/design/policies.md.
const modelWeight = 0.5

// SetModels sets the model term for a pod whose cards cc constrains (nil:
// none), from ModelCosts. Each unit the pod takes on a card of model X
// costs modelWeight·(p_X − floor), where floor is the least p of the models
// the pod may use that have free memory: a pod that may go anywhere pays
// for taking the memory restricted pods need, a pod restricted to that
// model pays nothing. Without costs (no restricted pod seen) the term is
// 0.
func (f *FragAware) SetModels(costs map[string]float64, cc *gpushare.CardConstraints) {
	f.modelCost, f.modelFloor = nil, 0
	if len(costs) == 0 {
		return
	}
	floor := math.Inf(1)
	for model, free := range f.freeByModel {
		if free <= 0 || model == "" {
			continue
		}
		if cc != nil && cc.ReadsModel() {
			if ok, _ := cc.AllowsModel(model); !ok {
				continue
			}
		}
		floor = min(floor, costs[model]) // 0 for a model none is restricted to
	}
	if math.IsInf(floor, 1) {
		return // no card the pod may use has free memory
	}
	f.modelCost, f.modelFloor = costs, floor
}

// modelTerm is the model term's cost, in units, of taking take units of a
// card of model.
func (f *FragAware) modelTerm(model string, take int64) float64 {
	if f.modelCost == nil {
		return 0
	}
	if d := f.modelCost[model] - f.modelFloor; d > 0 {
		return modelWeight * d * float64(take)
	}
	return 0
}
