package trace

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Variant derives a trace from another, the way Alibaba derived the openb
// traces other than the default one from it (more of one kind of pod), so
// that a policy can be tried on workloads nobody published: more CPU-only
// pods, more multi-GPU pods (of chosen sizes), GPU-model constraints. A
// Variant is applied with a seed, so the same flags always give the same
// trace.
type Variant struct {
	// MultiGPUShare, when above 0, appends clones of multi-GPU pods, drawn
	// uniformly, until their GPU memory is this share (0..1) of all pods'
	// GPU memory, as openb's multigpuN traces do (N% of the GPU demand).
	MultiGPUShare float64
	// MultiGPUCards, when not empty, clones only the multi-GPU pods asking
	// one of these numbers of cards (another mix of sizes).
	MultiGPUCards []int
	// CPUOnlyShare, when above 0, appends clones of the pods that ask no GPU
	// memory, drawn uniformly, until they are this share (0..1) of all pods.
	CPUOnlyShare float64
	// GPUSpecShare, when above 0, makes this share (0..1) of the GPU pods
	// (drawn uniformly, after the clones are added) accept only some card
	// models, as openb's gpu_spec: one model, and with probability ½ each
	// a further one up to GPUSpecModels, each drawn with probability in
	// proportion to the cards of that model among the nodes that could
	// hold the pod alone (enough cards, CPU and memory). Pods that already
	// name models keep them.
	GPUSpecShare float64
	// GPUSpecModels is the most models GPUSpecShare gives a pod, 1 to 3;
	// 0 is 2, as openb's gpuspec traces.
	GPUSpecModels int
	// GPUSpecAsLabel states the constraint of a pod given one model by
	// GPUSpecShare as users who select by labels would: a nodeSelector on
	// the product label in GPU Feature Discovery's form
	// (nvidia.com/gpu.product, which the device plugin publishes for the
	// node's first card), which kube-scheduler applies before it samples,
	// instead of gpushare.io/gpu-models, which the extender applies to
	// each card of the nodes sampled. Pods given two models keep the
	// annotation (a nodeSelector cannot say "either"). Models stays set
	// either way (fgd's target workload reads it).
	GPUSpecAsLabel bool
	// Seed drives every draw.
	Seed uint64
}

// IsZero reports whether v changes nothing.
func (v *Variant) IsZero() bool {
	return v.MultiGPUShare == 0 && v.CPUOnlyShare == 0 && v.GPUSpecShare == 0
}

// Apply returns the variant of tr: the multi-GPU clones first, then the
// CPU-only ones (so the CPU-only share counts the multi-GPU clones), then
// the model constraints. Clones are named after their pod with "-vK"
// appended, K counting from 0. tr is not modified.
func (v *Variant) Apply(tr *Trace) (*Trace, error) {
	for _, s := range []float64{v.MultiGPUShare, v.CPUOnlyShare} {
		if s < 0 || s >= 1 {
			return nil, fmt.Errorf("variant share %g: want 0 to less than 1", s)
		}
	}
	if v.GPUSpecShare < 0 || v.GPUSpecShare > 1 {
		return nil, fmt.Errorf("variant GPU-model share %g: want 0 to 1", v.GPUSpecShare)
	}
	if v.GPUSpecModels < 0 || v.GPUSpecModels > 3 {
		return nil, fmt.Errorf("variant models per pod %d: want 1 to 3", v.GPUSpecModels)
	}
	rng := rand.New(rand.NewPCG(v.Seed, 7))
	out := &Trace{Nodes: tr.Nodes, Pods: slices.Clone(tr.Pods)}
	clones := 0
	clone := func(p Pod) {
		p.Name += "-v" + strconv.Itoa(clones)
		p.Models = slices.Clone(p.Models)
		clones++
		out.Pods = append(out.Pods, p)
	}
	if v.MultiGPUShare > 0 {
		var multi []int
		var multiUnits, allUnits int64
		for i := range out.Pods {
			p := &out.Pods[i]
			allUnits += p.Units()
			if p.Kind == KindMulti {
				multiUnits += p.Units()
				if len(v.MultiGPUCards) == 0 || slices.Contains(v.MultiGPUCards, maxCards(p)) {
					multi = append(multi, i)
				}
			}
		}
		if len(multi) == 0 {
			return nil, errors.New("variant: the trace has no multi-GPU pod of the sizes to clone")
		}
		for float64(multiUnits) < v.MultiGPUShare*float64(allUnits) {
			p := tr.Pods[multi[rng.IntN(len(multi))]]
			multiUnits += p.Units()
			allUnits += p.Units()
			clone(p)
		}
	}
	if v.CPUOnlyShare > 0 {
		var cpu []int
		for i := range out.Pods {
			if out.Pods[i].Demand == nil {
				cpu = append(cpu, i)
			}
		}
		if len(cpu) == 0 {
			return nil, errors.New("variant: the trace has no pod that asks no GPU memory to clone")
		}
		n := len(cpu)
		for float64(n) < v.CPUOnlyShare*float64(len(out.Pods)) {
			clone(out.Pods[cpu[rng.IntN(len(cpu))]])
			n++
		}
	}
	if v.GPUSpecShare > 0 {
		v.constrain(out, rng)
	}
	return out, nil
}

// maxCards is the most cards one container of p asks.
func maxCards(p *Pod) int {
	k := 0
	for _, c := range p.Demand {
		k = max(k, c.Cards)
	}
	return k
}

// constrain gives a GPUSpecShare of tr's GPU pods model constraints (see
// Variant.GPUSpecShare).
func (v *Variant) constrain(tr *Trace, rng *rand.Rand) {
	var gpu []int
	for i := range tr.Pods {
		if tr.Pods[i].Demand != nil && len(tr.Pods[i].Models) == 0 && tr.Pods[i].Constraints == nil {
			gpu = append(gpu, i)
		}
	}
	rng.Shuffle(len(gpu), func(a, b int) { gpu[a], gpu[b] = gpu[b], gpu[a] })
	gpu = gpu[:int(v.GPUSpecShare*float64(len(gpu))+0.5)]
	most := v.GPUSpecModels
	if most == 0 {
		most = 2
	}
	sort.Ints(gpu)
	for _, i := range gpu {
		p := &tr.Pods[i]
		cards := map[string]int{} // model -> cards on the nodes that could hold p
		var models []string
		for j := range tr.Nodes {
			n := &tr.Nodes[j]
			if n.Model == "" || len(n.Cards) < maxCards(p) || n.MilliCPU < p.MilliCPU || n.MemoryMiB < p.MemoryMiB {
				continue
			}
			if _, ok := cards[n.Model]; !ok {
				models = append(models, n.Model)
			}
			cards[n.Model] += len(n.Cards)
		}
		sort.Strings(models)
		draw := func() string {
			total := 0
			for _, m := range models {
				total += cards[m]
			}
			k := rng.IntN(total)
			for _, m := range models {
				if k -= cards[m]; k < 0 {
					return m
				}
			}
			return models[len(models)-1]
		}
		if len(models) == 0 {
			continue
		}
		p.Models = []string{draw()}
		for len(p.Models) < most && rng.IntN(2) == 0 && len(models) > len(p.Models) {
			models = slices.DeleteFunc(models, func(m string) bool { return slices.Contains(p.Models, m) })
			p.Models = append(p.Models, draw())
		}
		if v.GPUSpecAsLabel && len(p.Models) == 1 {
			p.NodeSelector = map[string]string{gpushare.NVIDIALabelProduct: gpushare.LabelValue(p.Models[0])}
			continue
		}
		// The replay places by Constraints (the extender's predicate), as
		// ReadOpenbPods sets them from gpu_spec; Models alone would bind
		// only fgd's target tasks.
		p.Constraints = &gpushare.CardConstraints{Models: slices.Clone(p.Models)}
	}
}

// WriteOpenbPods writes pods as an openb pod list (name, cpu_milli,
// memory_mib, num_gpu, gpu_milli, gpu_spec), which ReadOpenbPods reads
// back. Only pods of one container asking one card's part or whole cards of
// OpenbMilli units fit that form.
func WriteOpenbPods(w io.Writer, pods []Pod) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"}); err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		gpus, milli := 0, int64(0)
		switch {
		case p.Demand == nil:
		case len(p.Demand) == 1 && p.Demand[0].Cards == 1 && p.Demand[0].Units <= OpenbMilli:
			gpus, milli = 1, p.Demand[0].Units
		case len(p.Demand) == 1 && p.Demand[0].Units == OpenbMilli:
			gpus, milli = p.Demand[0].Cards, OpenbMilli
		default:
			return fmt.Errorf("pod %s: its GPU demand has no openb form (one container, part of one card of %d units or whole cards)", p.Name, OpenbMilli)
		}
		rec := []string{p.Name, strconv.FormatInt(p.MilliCPU, 10), strconv.FormatInt(p.MemoryMiB, 10),
			strconv.Itoa(gpus), strconv.FormatInt(milli, 10), strings.Join(p.Models, "|")}
		if err := cw.Write(rec); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
