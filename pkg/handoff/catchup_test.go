package handoff

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// lateAPI is an API server holding pods that the handoff's informer has
// not delivered. during, when set, runs inside each read before it
// answers (the informer delivering meanwhile); err, when set, is the
// read's answer.
type lateAPI struct {
	mu     sync.Mutex
	pods   []*corev1.Pod
	during func()
	err    error
	reads  int
}

func (a *lateAPI) read() error {
	a.mu.Lock()
	a.reads++
	during, err := a.during, a.err
	a.mu.Unlock()
	if during != nil {
		during()
	}
	return err
}

func (a *lateAPI) readCount() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.reads
}

func (a *lateAPI) ListNodePods(_ context.Context, node string) ([]corev1.Pod, error) {
	if err := a.read(); err != nil {
		return nil, err
	}
	var out []corev1.Pod
	for _, p := range a.pods {
		if p.Spec.NodeName == node {
			out = append(out, *p.DeepCopy())
		}
	}
	return out, nil
}

// waitingPod is pod name (UID uid) as the extender's bind leaves it: c0
// asks units on card 0 of node n1.
func waitingPod(name string, uid types.UID, units int64) *corev1.Pod {
	a := &gpushare.Allocation{Node: "n1", Unit: gpushare.UnitGiB, Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, UUID: "GPU-0", Units: units}}},
	}}
	p := util.MakePod(name).GPUMem(units).Node("n1").Allocation(a).Annotation(gpushare.AnnotationAssigned, "false").Obj()
	p.UID = uid
	return p
}

// TestHandoffCatchesUpWithTheAPI: kubelet admits a pod that the plugin's
// informer has not delivered (kubelet watches its pods itself and often
// learns of a bind first). Both calls still match it, to the cards its
// annotation names, whatever kubelet's PodResources says and whenever the
// informer delivers; a call the informer is up to date for reads nothing
// from the API server.
func TestHandoffCatchesUpWithTheAPI(t *testing.T) {
	const units = 16
	calls := []struct {
		name string
		// call plays kubelet for one container and returns the pod the
		// plugin matched.
		call func(ctx context.Context, h *Handoff) (types.UID, error)
	}{
		{name: "GetPreferredAllocation", call: func(ctx context.Context, h *Handoff) (types.UID, error) {
			ids, err := h.Prefer(ctx, append(unitsOn("GPU-1", 0, 16), unitsOn("GPU-0", 0, 16)...), nil, units)
			if err != nil {
				return "", err
			}
			if diff := cmp.Diff(unitsOn("GPU-0", 0, units), ids); diff != "" {
				return "", errors.New("preferred IDs are not the annotated card's (-want +got):\n" + diff)
			}
			a, err := h.Allocate(ctx, ids)
			if err != nil {
				return "", err
			}
			return a.Pod, nil
		}},
		{name: "Allocate", call: func(ctx context.Context, h *Handoff) (types.UID, error) {
			a, err := h.Allocate(ctx, unitsOn("GPU-0", 0, units))
			if err != nil {
				return "", err
			}
			return a.Pod, nil
		}},
	}
	listed := KubeletPod{Namespace: "default", Name: "p", Containers: map[string][]string{"c0": nil}}
	tests := []struct {
		name string
		// kubelet is what PodResources answers.
		kubelet *fakeKubelet
		// known are the pods the informer delivered before the call, with
		// their containers granted (admitted earlier).
		known []*corev1.Pod
		// api holds the pod under admission; deliver: the informer
		// delivers it during the plugin's read, which then fails.
		deliver  bool
		apiError error
		// inInformer: the informer delivered the pod before the call.
		inInformer bool
		wantReads  int
		// gone: UIDs whose grants must be forgotten after the call.
		gone []types.UID
	}{
		{name: "the informer is up to date: no API read", kubelet: &fakeKubelet{pods: []KubeletPod{listed}}, inInformer: true},
		{name: "kubelet lists the pod, the informer has not delivered it", kubelet: &fakeKubelet{pods: []KubeletPod{listed}}, wantReads: 1},
		{name: "the informer delivers it while the read fails", kubelet: &fakeKubelet{pods: []KubeletPod{listed}},
			deliver: true, apiError: errors.New("the API server timed out"), wantReads: 1},
		{name: "PodResources is down", kubelet: &fakeKubelet{err: errors.New("connection refused")}, wantReads: 1},
		{name: "kubelet does not list the pod under admission", kubelet: &fakeKubelet{}, wantReads: 1},
		{name: "a deleted pod's name is taken by the new pod", kubelet: &fakeKubelet{pods: []KubeletPod{listed}},
			known: []*corev1.Pod{waitingPod("p", "old", units)}, wantReads: 1, gone: []types.UID{"old"}},
	}
	for _, c := range calls {
		for _, tc := range tests {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				_, ctx := ktesting.NewTestContext(t)
				pod := waitingPod("p", "new", units)
				api := &lateAPI{pods: []*corev1.Pod{pod}, err: tc.apiError}
				kubelet := &fakeKubelet{pods: tc.kubelet.pods, err: tc.kubelet.err}
				h := New(Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards, Kubelet: kubelet, API: api})
				for _, k := range tc.known {
					h.UpsertPod(k)
					// Admitted on card 0 before it was deleted.
					if _, err := h.Allocate(ctx, unitsOn("GPU-0", 0, units)); err != nil {
						t.Fatalf("admitting the known pod %s: %v", k.Name, err)
					}
				}
				if tc.inInformer {
					h.UpsertPod(pod)
				}
				if tc.deliver {
					api.during = func() { h.UpsertPod(pod) }
				}
				got, err := c.call(ctx, h)
				if err != nil {
					t.Fatalf("kubelet's admission failed: %v", err)
				}
				if got != pod.UID {
					t.Errorf("matched pod UID %s, want %s", got, pod.UID)
				}
				if n := api.readCount(); n != tc.wantReads {
					t.Errorf("%d API reads, want %d", n, tc.wantReads)
				}
				for _, uid := range tc.gone {
					if _, _, ok := h.Grant(uid, "c0"); ok {
						t.Errorf("pod %s is gone from the API, and the plugin still holds its grant", uid)
					}
				}
			})
		}
	}
}
