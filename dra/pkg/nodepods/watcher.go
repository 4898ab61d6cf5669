package nodepods

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/dra/pkg/devices"
)

// Watcher keeps, from an informer of the pods bound to one node, what
// the device plugin's pods hold on the node's cards (HeldBy) and the
// claims the pods use. It is safe for concurrent use.
type Watcher struct {
	node  string
	cards []devices.Card

	mu sync.Mutex
	// pods: pod UID -> what it holds and uses; pods that do neither are
	// absent.
	pods map[types.UID]podUse
	// onChange is called, without mu, with Held after each change of it.
	onChange func(held map[string]int64)
}

// podUse is what one pod holds and uses.
type podUse struct {
	namespace, name string
	// held: card UUID -> MiB (HeldBy).
	held map[string]int64
	// claims: the names of the ResourceClaims it uses (ClaimsOf).
	claims []string
}

// New returns a watcher of node's pods over cards; Start starts it.
func New(node string, cards []devices.Card) *Watcher {
	return &Watcher{node: node, cards: cards, pods: map[types.UID]podUse{}}
}

// Start follows the node's pods through client, which needs list and watch
// on pods, until ctx ends. It returns once the informer has synced.
// onChange, when set, is called with Held whenever it changes.
func (w *Watcher) Start(ctx context.Context, client kubernetes.Interface, onChange func(held map[string]int64)) error {
	w.mu.Lock()
	w.onChange = onChange
	w.mu.Unlock()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", w.node).String()
	}))
	inf := factory.Core().V1().Pods().Informer()
	logger := klog.FromContext(ctx)
	reg, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.update(logger, obj) },
		UpdateFunc: func(_, obj any) { w.update(logger, obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				w.set(pod.UID, podUse{})
			}
		},
	})
	if err != nil {
		return fmt.Errorf("following the pods of node %s: %w", w.node, err)
	}
	factory.Start(ctx.Done())
	if !toolscache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
		return fmt.Errorf("listing the pods of node %s: %w", w.node, errors.Join(ctx.Err(), context.Cause(ctx)))
	}
	return nil
}

// update records what pod obj holds and uses.
func (w *Watcher) update(logger klog.Logger, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.Spec.NodeName != w.node {
		w.set(pod.UID, podUse{}) // the field selector keeps them out; a fake client does not
		return
	}
	held, err := HeldBy(pod, w.node, w.cards)
	if err != nil {
		logger.Error(err, "Ignoring a pod's GPU allocation", "pod", klog.KObj(pod))
	}
	w.set(pod.UID, podUse{namespace: pod.Namespace, name: pod.Name, held: held, claims: ClaimsOf(pod)})
}

// set replaces what uid holds and uses, and calls onChange if Held
// changed.
func (w *Watcher) set(uid types.UID, use podUse) {
	w.mu.Lock()
	before := w.heldLocked()
	if len(use.held) == 0 && len(use.claims) == 0 {
		delete(w.pods, uid)
	} else {
		w.pods[uid] = use
	}
	after := w.heldLocked()
	onChange := w.onChange
	w.mu.Unlock()
	if onChange != nil && !maps.Equal(before, after) {
		onChange(after)
	}
}

// Held returns what the device plugin's pods still running on the node
// hold: card UUID -> MiB. Cards they do not hold are absent.
func (w *Watcher) Held() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.heldLocked()
}

func (w *Watcher) heldLocked() map[string]int64 {
	out := map[string]int64{}
	for _, p := range w.pods {
		for uuid, mib := range p.held {
			out[uuid] += mib
		}
	}
	return out
}

// HeldPods returns the device plugin's pods still running on the node
// that hold memory, as namespace/name, sorted.
func (w *Watcher) HeldPods() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, p := range w.pods {
		if len(p.held) > 0 {
			out = append(out, p.namespace+"/"+p.name)
		}
	}
	slices.Sort(out)
	return out
}

// ClaimInUse reports whether a pod bound to the node that has not
// finished uses the ResourceClaim namespace/name.
func (w *Watcher) ClaimInUse(namespace, name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pods {
		if p.namespace == namespace && slices.Contains(p.claims, name) {
			return true
		}
	}
	return false
}
