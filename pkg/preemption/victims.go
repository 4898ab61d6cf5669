package preemption

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	policyinformers "k8s.io/client-go/informers/policy/v1"
	"k8s.io/client-go/kubernetes"
	policylisters "k8s.io/client-go/listers/policy/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/gpushare/gpushare/pkg/preemption/planner"
)

// podVictims describes victims from the pod informer and a
// PodDisruptionBudget informer of its own.
type podVictims struct {
	pods   PodReader
	pdbs   policylisters.PodDisruptionBudgetLister
	synced func() bool
	// generation counts the budgets' changes (generation()).
	generation atomic.Uint64
}

func newPodVictims(pods PodReader, pdbs policyinformers.PodDisruptionBudgetInformer) (*podVictims, error) {
	v := &podVictims{pods: pods, pdbs: pdbs.Lister()}
	changed := func(any) { v.generation.Add(1) }
	reg, err := pdbs.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: changed, UpdateFunc: func(_, obj any) { changed(obj) }, DeleteFunc: changed,
	})
	if err != nil {
		return nil, fmt.Errorf("watching PodDisruptionBudgets: %w", err)
	}
	v.synced = reg.HasSynced
	return v, nil
}

// forPlan returns the planner.Victims of one plan. Each namespace's budgets
// are listed, and their selectors converted, once for the whole plan.
func (v *podVictims) forPlan() *planVictims {
	return &planVictims{podVictims: v, budgets: map[string][]budget{}}
}

// planVictims implements planner.Victims for one plan.
type planVictims struct {
	*podVictims
	// budgets: namespace -> its PodDisruptionBudgets, selectors converted.
	budgets map[string][]budget
}

var _ planner.Victims = (*planVictims)(nil)

// budget is a PodDisruptionBudget with its selector converted.
type budget struct {
	name     string // namespace/name
	selector labels.Selector
}

// Victim describes the pod. Its Budgets are those the Eviction API would
// check (registry/core/pod/storage/eviction.go). A pod that is not running
// yet (phase Pending) has none: the Eviction API deletes it at once.
// Otherwise they are every budget of the namespace whose selector matches
// the pod's labels. An empty selector ({}) matches every pod, and a missing
// or invalid one none.
func (v *planVictims) Victim(namespace, name string, uid types.UID) (planner.Victim, bool) {
	pod, ok := v.pods.Pod(namespace, name)
	if !ok || pod.UID != uid {
		return planner.Victim{}, false
	}
	out := planner.Victim{Priority: pod.Priority, StartTime: pod.StartTime, Terminating: pod.Terminating, GraceSeconds: pod.GraceSeconds}
	if pod.Phase == corev1.PodPending || pod.Terminating {
		return out, true
	}
	var podLabels labels.Labels = pod.Labels // boxed once, not once per budget
	for _, b := range v.namespace(namespace) {
		if b.selector.Matches(podLabels) {
			out.Budgets = append(out.Budgets, b.name)
		}
	}
	return out, true
}

// namespace returns ns's budgets, listing and converting them on first use.
func (v *planVictims) namespace(ns string) []budget {
	if bs, ok := v.budgets[ns]; ok {
		return bs
	}
	list, err := v.pdbs.PodDisruptionBudgets(ns).List(labels.Everything())
	if err != nil {
		list = nil // the lister of an informer's store does not fail
	}
	bs := make([]budget, 0, len(list))
	for _, b := range list {
		sel, err := metav1.LabelSelectorAsSelector(b.Spec.Selector)
		if err != nil {
			continue // the Eviction API: an invalid selector matches no pod
		}
		bs = append(bs, budget{name: b.Namespace + "/" + b.Name, selector: sel})
	}
	v.budgets[ns] = bs
	return bs
}

// Allowed returns the budget's status.disruptionsAllowed. It is 0 when
// unknown, and while the disruption controller has not processed its spec;
// the Eviction API then refuses too.
func (v *podVictims) Allowed(budget string) int32 {
	ns, name, _ := strings.Cut(budget, "/")
	b, err := v.pdbs.PodDisruptionBudgets(ns).Get(name)
	if err != nil || b.Status.ObservedGeneration < b.Generation {
		return 0
	}
	return b.Status.DisruptionsAllowed
}

// ClientAPI implements API with a clientset.
type ClientAPI struct {
	Client kubernetes.Interface
}

var _ API = ClientAPI{}

// Nominate sends a merge patch of the status subresource that also sets
// metadata.uid, so that it cannot land on a successor of the same name.
func (a ClientAPI) Nominate(ctx context.Context, namespace, name string, uid types.UID, node string) error {
	var nominated any = node
	if node == "" {
		nominated = nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid}, "status": map[string]any{"nominatedNodeName": nominated}})
	if err != nil {
		return err
	}
	_, err = a.Client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{}, "status")
	return err
}

func (a ClientAPI) Evict(ctx context.Context, namespace, name string, uid types.UID) error {
	return a.Client.CoreV1().Pods(namespace).EvictV1(ctx, &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Namespace: namespace, Name: name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}},
	})
}
