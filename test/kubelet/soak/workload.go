package soak

import (
	"fmt"
	"math/rand/v2"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// Shape is a kind of pod the workload creates.
type Shape string

// The shapes, every amount in GiB.
const (
	// ShapeShare is one container with a share of one card (1-8 GiB).
	ShapeShare Shape = "share"
	// ShapeMulti is two GPU containers (1-4 GiB each) and one without GPU.
	ShapeMulti Shape = "multi"
	// ShapeTwoCard is one container split evenly over two cards (1-4 GiB each).
	ShapeTwoCard Shape = "two-card"
	// ShapeInit is an init container (2-6 GiB) before an app container (1-3 GiB).
	ShapeInit Shape = "init"
)

// Shapes are all shapes.
var Shapes = []Shape{ShapeShare, ShapeMulti, ShapeTwoCard, ShapeInit}

// Op is one workload step: create a pod or delete one, then wait.
type Op struct {
	// Create is the pod to create; nil for a deletion.
	Create *corev1.Pod
	Shape  Shape
	// Units is Create's demand on its node (gpushare.Demand.Total).
	Units int64
	// Delete names the pod to delete when Create is nil.
	Delete string
	// Wait is the pause before the next step.
	Wait time.Duration
}

// Workload draws pod arrivals and departures from a seed. It keeps its own
// book of the pods it created and has not deleted, so its decisions do not
// depend on the cluster's timing: the same seed gives the same steps.
type Workload struct {
	rng *rand.Rand
	ns  string
	// maxPods and maxUnits bound what the live pods ask, so that they all
	// fit once the faults are over.
	maxPods  int
	maxUnits int64
	// maxWait bounds Op.Wait.
	maxWait time.Duration
	// maxTwoCard bounds the live ShapeTwoCard pods; negative: no bound.
	maxTwoCard int

	// created counts the pods created; names are numbered by it.
	created int
	// live: the pods created and not deleted, in creation order.
	live []livePod
	// units is the sum of live's units.
	units int64
	// twoCard counts the live ShapeTwoCard pods.
	twoCard int
}

type livePod struct {
	name  string
	units int64
	shape Shape
}

// Bounds bound what the live pods of a workload ask.
type Bounds struct {
	// Pods and Units (GiB) bound the live pods and their demand.
	Pods  int
	Units int64
	// TwoCard bounds the live ShapeTwoCard pods; negative for no bound.
	// (The soak bounded them until the shipped configuration marked
	// aliyun.com/gpu-count ignoredByScheduler and the device plugin
	// stopped publishing it: kube-scheduler had counted it as consumed, so
	// a node of 4 cards took two such pods whatever memory was free.)
	TwoCard int
}

// NewWorkload returns the workload of seed in namespace ns.
func NewWorkload(seed uint64, ns string, b Bounds, maxWait time.Duration) *Workload {
	return &Workload{rng: rand.New(rand.NewPCG(seed, 0x9d5)), ns: ns, maxPods: b.Pods, maxUnits: b.Units, maxTwoCard: b.TwoCard, maxWait: maxWait}
}

// Created is the number of pods created so far.
func (w *Workload) Created() int { return w.created }

// Next returns the next step: a creation while the bounds allow it (three
// times in five), else the deletion of a live pod drawn at random.
func (w *Workload) Next() Op {
	wait := time.Duration(w.rng.Int64N(int64(w.maxWait) + 1))
	shape := Shapes[w.rng.IntN(len(Shapes))]
	pod := w.pod(fmt.Sprintf("p-%04d-%s", w.created+1, shape), shape)
	units := demand(pod)
	create := w.rng.IntN(5) < 3
	fits := len(w.live) < w.maxPods && w.units+units <= w.maxUnits &&
		(shape != ShapeTwoCard || w.maxTwoCard < 0 || w.twoCard < w.maxTwoCard)
	if len(w.live) == 0 || (create && fits) {
		if fits {
			w.created++
			w.live = append(w.live, livePod{pod.Name, units, shape})
			w.units += units
			if shape == ShapeTwoCard {
				w.twoCard++
			}
			return Op{Create: pod, Shape: shape, Units: units, Wait: wait}
		}
		return Op{Wait: wait}
	}
	i := w.rng.IntN(len(w.live))
	gone := w.live[i]
	w.live = append(w.live[:i], w.live[i+1:]...)
	w.units -= gone.units
	if gone.shape == ShapeTwoCard {
		w.twoCard--
	}
	return Op{Delete: gone.name, Wait: wait}
}

// pod builds a pod of shape, drawing its sizes.
func (w *Workload) pod(name string, shape Shape) *corev1.Pod {
	in := func(lo, hi int64) int64 { return lo + w.rng.Int64N(hi-lo+1) }
	p := util.MakePod(name).Namespace(w.ns).UID("")
	switch shape {
	case ShapeShare:
		p.GPUMem(in(1, 8))
	case ShapeMulti:
		p.GPUMem(in(1, 4)).GPUMem(in(1, 4)).Container("sidecar")
	case ShapeTwoCard:
		p.GPUMemCards(2*in(1, 4), 2)
	case ShapeInit:
		p.InitGPUMem(in(2, 6)).GPUMem(in(1, 3))
	}
	return p.Obj()
}

// demand is what pod asks of its node, in GiB.
func demand(pod *corev1.Pod) int64 {
	d, err := gpushare.PodDemand(pod)
	if err != nil {
		panic(fmt.Sprintf("a workload pod has an invalid demand: %v", err)) // the shapes above are valid
	}
	return d.Total()
}
