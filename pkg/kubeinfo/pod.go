package kubeinfo

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// PodInfo is what the extender keeps of a pod, decoded once when the pod
// arrives. The pod informer stores PodInfo instead of the Pod, which keeps
// its store small (measured:
// docs/benchmarks.md#what-the-informers-objects-cost). Of the pod's
// metadata it holds only name, namespace, UID and resourceVersion. It also
// holds the labels of a pod that asks gpu-mem, which a preemption matches
// against PodDisruptionBudgets, as a LabelSet. A whole metav1.ObjectMeta
// would cost more a pod.
type PodInfo struct {
	Name, Namespace string
	UID             types.UID
	ResourceVersion string
	Labels          LabelSet
	NodeName        string
	Phase           corev1.PodPhase
	// Demand is nil for a pod that asks no gpu-mem or asks it invalidly.
	Demand gpushare.Demand
	// ClaimPod: the pod asks gpushare.io/dra-claim (gpushare.AsksDRAClaim).
	// Its GPU memory is a claim of the gpushare DRA driver. The workload model
	// learns it from the claim (cache.Cache.UpsertClaim), not as a pod asking
	// no GPU memory.
	ClaimPod bool
	// DRA: Demand is the memory the pod's claim of the gpushare DRA driver
	// asks. The extender's filter sets it; NewPodInfo never does. Such a pod
	// fits only the DRA driver's nodes, on the card kube-scheduler's first fit
	// takes there (allocator.SliceOrder). Pods asking gpu-mem fit only the
	// device plugin's nodes.
	DRA bool
	// Allocation is the parsed gpushare.io/allocation, nil when absent or invalid.
	Allocation *gpushare.Allocation
	// AllocationErr says why a gpushare.io/allocation annotation the pod
	// carries did not parse; "" when it parsed or is absent.
	AllocationErr string
	// LegacyIndex is ALIYUN_COM_GPU_MEM_IDX, -1 when absent or invalid.
	LegacyIndex int
	// Policy is the gpushare.io/policy annotation.
	Policy string
	// Constraints are the cards the pod's gpushare.io/gpu-* annotations allow
	// (gpushare.ParseCardConstraints), nil when it carries none.
	// ConstraintsErr says why they are invalid; the pod then fits nowhere.
	Constraints    *gpushare.CardConstraints
	ConstraintsErr error
	// Models are the models the pod is restricted to, by its annotations
	// or by a nodeSelector on a product label (gpushare.ModelRestriction);
	// nil when neither names one. The workload model learns them.
	Models *gpushare.CardConstraints
	// MilliCPU and MemoryMiB are the pod's CPU (millicores) and memory
	// (MiB) requests as kube-scheduler counts them (PodRequests).
	MilliCPU, MemoryMiB int64

	// MPSUser is the Linux user the pod's MPS clients run as
	// (gpushare.PodMPSUser). On a card in mps mode it may only join clients of
	// the same user.
	MPSUser gpushare.MPSUser

	// Priority is spec.priority, 0 when unset. PreemptNever: its
	// preemptionPolicy is Never, so it evicts nobody.
	Priority     int32
	PreemptNever bool
	// Terminating: the pod has a deletionTimestamp; its memory comes free
	// when it is gone. GraceSeconds is its termination grace period
	// (seconds). StartTime is its status.startTime, or its creation until it
	// has one. A preemption prefers to evict the younger of two pods of one
	// priority, as kube-scheduler does.
	Terminating  bool
	GraceSeconds int64
	StartTime    time.Time
}

// GetName, GetNamespace and GetUID are the pod's; klog.KObj and the
// extender read them.
func (p *PodInfo) GetName() string      { return p.Name }
func (p *PodInfo) GetNamespace() string { return p.Namespace }
func (p *PodInfo) GetUID() types.UID    { return p.UID }

// GetObjectMeta makes the pod's metadata for the informer's store: its
// key, and a deleted pod's resourceVersion. It makes a PodInfo a
// metav1.ObjectMetaAccessor, which meta.Accessor takes. The informer calls
// it for every key it computes, so it holds no labels (read Labels, a
// LabelSet): one allocation, and no map besides.
func (p *PodInfo) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion}
}

// NewPodInfo extracts a PodInfo from a pod.
func NewPodInfo(pod *corev1.Pod) *PodInfo {
	info := &PodInfo{
		Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID, ResourceVersion: pod.ResourceVersion,
		NodeName: pod.Spec.NodeName,
		Phase:    pod.Status.Phase,
		Policy:   pod.Annotations[gpushare.AnnotationPolicy],
	}
	info.MilliCPU, info.MemoryMiB = PodRequests(pod)
	info.ClaimPod = gpushare.AsksDRAClaim(pod)
	if d, err := gpushare.PodDemand(pod); err == nil {
		info.Demand = d
		info.Labels = NewLabelSet(pod.Labels)
		info.MPSUser = gpushare.PodMPSUser(pod, d)
	}
	if pod.Spec.Priority != nil {
		info.Priority = *pod.Spec.Priority
	}
	info.PreemptNever = pod.Spec.PreemptionPolicy != nil && *pod.Spec.PreemptionPolicy == corev1.PreemptNever
	info.Terminating = pod.DeletionTimestamp != nil
	info.GraceSeconds = corev1.DefaultTerminationGracePeriodSeconds
	if g := pod.Spec.TerminationGracePeriodSeconds; g != nil {
		info.GraceSeconds = *g
	}
	if pod.DeletionGracePeriodSeconds != nil {
		info.GraceSeconds = *pod.DeletionGracePeriodSeconds
	}
	info.StartTime = pod.CreationTimestamp.Time
	if pod.Status.StartTime != nil {
		info.StartTime = pod.Status.StartTime.Time
	}
	info.Constraints, info.ConstraintsErr = gpushare.ParseCardConstraints(pod.Annotations)
	info.Models = gpushare.ModelRestriction(info.Constraints, pod.Spec.NodeSelector)
	if s, ok := pod.Annotations[gpushare.AnnotationAllocation]; ok {
		if a, err := gpushare.ParseAllocation(s); err == nil {
			info.Allocation = a
		} else {
			info.AllocationErr = err.Error()
		}
	}
	info.LegacyIndex = -1
	// The cache keeps the index in 32 bits; no node has 2³¹ cards.
	if idx, err := strconv.ParseInt(pod.Annotations[gpushare.AnnotationIndex], 10, 32); err == nil && idx >= 0 {
		info.LegacyIndex = int(idx)
	}
	if a := info.Allocation; a != nil {
		// Share the strings the pod already holds (the node's name, the
		// unit's constant) instead of keeping the decoder's copies.
		if a.Node == info.NodeName {
			a.Node = info.NodeName
		}
		switch a.Unit {
		case gpushare.UnitGiB:
			a.Unit = gpushare.UnitGiB
		case gpushare.UnitMiB:
			a.Unit = gpushare.UnitMiB
		}
	}
	return info
}

// Placeable returns an error, naming the pod, when no node may take it
// whatever its cards: it asks no gpu-mem, or its card annotations are
// invalid.
func (p *PodInfo) Placeable() error {
	switch {
	case p.Demand == nil:
		return fmt.Errorf("pod %s/%s asks no %s", p.Namespace, p.Name, gpushare.ResourceGPUMem)
	case p.ConstraintsErr != nil:
		return fmt.Errorf("pod %s/%s: %w; it fits no node until the annotation is fixed", p.Namespace, p.Name, p.ConstraintsErr)
	}
	return nil
}

// LabelSet is a pod's labels as key-value pairs sorted by key, nil for
// none. It is a labels.Labels that a PodDisruptionBudget's selector
// matches. One slice costs less than the decoded map, whose smallest table
// is hundreds of bytes (measured:
// docs/benchmarks.md#what-the-informers-objects-cost).
type LabelSet []Label

// Label is one label of a LabelSet.
type Label struct{ Key, Value string }

// NewLabelSet returns m as a LabelSet, nil when m is empty.
func NewLabelSet(m map[string]string) LabelSet {
	if len(m) == 0 {
		return nil
	}
	l := make(LabelSet, 0, len(m))
	for k, v := range m {
		l = append(l, Label{k, v})
	}
	slices.SortFunc(l, func(a, b Label) int { return cmp.Compare(a.Key, b.Key) })
	return l
}

// Lookup returns the value of label key and whether the set has it.
func (l LabelSet) Lookup(key string) (string, bool) {
	i, ok := slices.BinarySearchFunc(l, key, func(e Label, k string) int { return cmp.Compare(e.Key, k) })
	if !ok {
		return "", false
	}
	return l[i].Value, true
}

// Has reports whether the set has label key.
func (l LabelSet) Has(key string) bool {
	_, ok := l.Lookup(key)
	return ok
}

// Get returns the value of label key, "" when the set lacks it.
func (l LabelSet) Get(key string) string {
	v, _ := l.Lookup(key)
	return v
}

var _ labels.Labels = LabelSet(nil)

// Map returns the set as a map, nil for none.
func (l LabelSet) Map() map[string]string {
	if len(l) == 0 {
		return nil
	}
	m := make(map[string]string, len(l))
	for _, e := range l {
		m[e.Key] = e.Value
	}
	return m
}
