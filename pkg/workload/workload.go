package workload

import (
	"math"
	"sort"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Workload learns the cluster's typical requests from the pods it sees.
// Each observed container shape gains weight 1, and all weights decay by a
// factor per observation. So the model follows a changing workload. It
// keeps at most maxShapes shapes. It is not safe for concurrent use.
type Workload struct {
	weights map[shapeKey]float64 // shape -> decayed count
	// cpu: shape -> decayed sum of the millicores its requests asked, on
	// the same scale as weights.
	cpu map[shapeKey]float64
	// mem: likewise for memory, in MiB.
	mem map[shapeKey]float64
	// scale is the factor by which stored weights must be multiplied to get
	// their current value. Decaying all weights is a multiplication of it.
	scale float64
	// demandMilliCPU and demandUnits are the CPU (millicores) and GPU
	// memory (units) that recent pods asked. Pods without GPU memory count
	// too (ObserveCPUOnly). Each pod's weight decays by workloadDecay per
	// later pod. See CPUPerUnit.
	demandMilliCPU, demandUnits float64
	// restricted: the restrictions to GPU models of recent pods, by
	// restrictionKey (see Restrictions).
	restricted map[string]*restricted
}

type shapeKey struct {
	units int64
	cards int
}

const (
	// workloadDecay is the weight a shape keeps per later observation. A
	// shape seen 1,000 observations ago counts 0.999^1000 ≈ 0.37 of a new one.
	workloadDecay = 0.999
	maxShapes     = 64
	// TypicalShapes is how many shapes Typical returns at most.
	TypicalShapes = 16
)

// New returns an empty model.
func New() *Workload {
	return &Workload{weights: map[shapeKey]float64{}, cpu: map[shapeKey]float64{}, mem: map[shapeKey]float64{}, scale: 1}
}

// Observe records the container shapes of one pod's demand.
func (w *Workload) Observe(d gpushare.Demand) { w.ObservePod(d, 0, 0) }

// ObservePod records the container shapes of one pod's demand. It also
// records the CPU (millicores) and memory (MiB) the pod asks, 0 when
// unknown, shared among its GPU containers by units.
func (w *Workload) ObservePod(d gpushare.Demand, milliCPU, memMiB int64) {
	total := d.Total()
	w.observeDemand(milliCPU, total)
	for _, c := range d {
		w.scale /= workloadDecay
		k := shapeKey{c.Units, c.Cards}
		w.weights[k] += w.scale
		if milliCPU > 0 && total > 0 {
			w.cpu[k] += w.scale * float64(milliCPU) * float64(c.Total()) / float64(total)
		}
		if memMiB > 0 && total > 0 {
			w.mem[k] += w.scale * float64(memMiB) * float64(c.Total()) / float64(total)
		}
	}
	if w.scale > 1e100 { // renormalise before float64 overflows
		for k := range w.weights {
			w.weights[k] /= w.scale
			w.cpu[k] /= w.scale
			w.mem[k] /= w.scale
		}
		w.scale = 1
	}
	if len(w.weights) > maxShapes {
		w.evictLightest()
	}
}

// ObserveCPUOnly records a pod that asks no GPU memory and milliCPU
// millicores, placed on a node with cards. It shares their CPU with the pods
// that do ask GPU memory (see CPUPerUnit). Pods bound to nodes without cards
// are not recorded, as they take no CPU from GPU pods.
func (w *Workload) ObserveCPUOnly(milliCPU int64) { w.observeDemand(milliCPU, 0) }

func (w *Workload) observeDemand(milliCPU, units int64) {
	w.demandMilliCPU = w.demandMilliCPU*workloadDecay + float64(max(0, milliCPU))
	w.demandUnits = w.demandUnits*workloadDecay + float64(max(0, units))
	w.decayRestricted()
}

// CPUPerUnit returns the CPU, in millicores, that the recent pods asked
// per unit of GPU memory they asked. Pods without GPU memory count too. It
// is 0 before any pod with GPU memory or with CPU. Example, decay left out:
// a pod asks 1000 units and 10 cores, then one asks no GPU memory and 4
// cores. That is 14000 / 1000 = 14 millicores per unit.
func (w *Workload) CPUPerUnit() float64 {
	if w.demandUnits <= 0 {
		return 0
	}
	return w.demandMilliCPU / w.demandUnits
}

func (w *Workload) evictLightest() {
	var lightest shapeKey
	lw := math.Inf(1)
	for k, v := range w.weights {
		if v < lw || (v == lw && (k.units < lightest.units)) {
			lightest, lw = k, v
		}
	}
	delete(w.weights, lightest)
	delete(w.cpu, lightest)
	delete(w.mem, lightest)
}

// Typical returns up to TypicalShapes heaviest shapes, with weights summing
// to 1. The heaviest come first, and the smaller among equals. It is empty
// before any observation.
func (w *Workload) Typical() []allocator.Shape {
	out := make([]allocator.Shape, 0, len(w.weights))
	for k, v := range w.weights {
		out = append(out, allocator.Shape{Units: k.units, Cards: k.cards, Weight: v, MilliCPU: w.cpu[k] / v, MemoryMiB: w.mem[k] / v})
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].Weight != out[b].Weight {
			return out[a].Weight > out[b].Weight
		}
		if out[a].Units != out[b].Units {
			return out[a].Units < out[b].Units
		}
		return out[a].Cards < out[b].Cards
	})
	if len(out) > TypicalShapes {
		out = out[:TypicalShapes]
	}
	var sum float64
	for _, s := range out {
		sum += s.Weight
	}
	for i := range out {
		out[i].Weight /= sum
	}
	return out
}
