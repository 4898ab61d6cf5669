package kubelet_test

import (
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/test/util"
)

// podWatch makes every pod watch of a fake clientset go through a gate:
// while the gate is held, the events wait, in order, and are delivered
// once it is released. Held, the plugin's informer lags behind what
// kubelet (the test) sees, for as long as the test says.
type podWatch struct {
	mu sync.Mutex
	// open is closed while the gate is open.
	open chan struct{}
}

func newPodWatch(t *testing.T, client *fake.Clientset) *podWatch {
	t.Helper()
	g := &podWatch{open: make(chan struct{})}
	close(g.open)
	client.PrependWatchReactor("pods", func(action clienttesting.Action) (bool, watch.Interface, error) {
		w, err := client.Tracker().Watch(action.GetResource(), action.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		return true, g.gate(w), nil
	})
	return g
}

// hold keeps the events from now on until release.
func (g *podWatch) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open = make(chan struct{})
}

// release delivers the kept events, and the later ones at once.
func (g *podWatch) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

func (g *podWatch) opened() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open
}

// gatedWatch forwards inner's events when the gate is open.
type gatedWatch struct {
	inner watch.Interface
	out   chan watch.Event
	stop  chan struct{}
	once  sync.Once
}

func (g *podWatch) gate(inner watch.Interface) watch.Interface {
	w := &gatedWatch{inner: inner, out: make(chan watch.Event), stop: make(chan struct{})}
	go func() {
		defer close(w.out)
		for ev := range inner.ResultChan() {
			select {
			case <-g.opened():
			case <-w.stop:
				return
			}
			select {
			case w.out <- ev:
			case <-w.stop:
				return
			}
		}
	}()
	return w
}

func (w *gatedWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *gatedWatch) Stop() {
	w.once.Do(func() {
		close(w.stop)
		w.inner.Stop()
	})
}

// TestAdmittedBeforeTheInformerDelivers: kubelet watches its pods itself
// and often admits a pod before the plugin's informer has delivered it.
// Here the informer is held back for the whole admission, so the order is
// certain. The plugin must still run the container on the card its
// annotation names: it reads the node's pods from the API server.
func TestAdmittedBeforeTheInformerDelivers(t *testing.T) {
	tests := []struct {
		name string
		// listAfterAdmit: PodResources does not list the pod under
		// admission (the plugin's only hint then is the API).
		listAfterAdmit bool
		// reuse: a pod of the same name ran on the card and was deleted
		// while the informer was held (a StatefulSet's pod re-created).
		reuse bool
	}{
		{name: "a new pod, PodResources not listing it", listAfterAdmit: true},
		{name: "a new pod under a deleted pod's name", reuse: true},
		{name: "a new pod under a deleted pod's name, PodResources not listing it", reuse: true, listAfterAdmit: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, setup{fakeGPUs: "2xTesla-T4:16GiB", listAfterAdmit: tc.listAfterAdmit, holdablePodWatch: true})
			at := time.Now()
			if tc.reuse {
				old := e.bind(util.MakePod("p").UID("uid-p-old").GPUMem(16), map[string][]int{"c0": {1}}, at)
				if _, err := e.host.Admit(old); err != nil {
					t.Fatalf("admitting the first pod p: %v", err)
				}
				e.settle([]*corev1.Pod{old}) // the plugin knows it, admitted
				e.podWatch.hold()
				if err := e.client.CoreV1().Pods(old.Namespace).Delete(e.ctx, old.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				e.host.Remove(old.UID)
			} else {
				e.podWatch.hold()
			}
			pod := e.bind(util.MakePod("p").UID("uid-p-new").GPUMem(16), map[string][]int{"c0": {1}}, at.Add(time.Second))
			res, err := e.host.Admit(pod)
			if err != nil {
				t.Fatalf("kubelet's admission of p failed: %v", err)
			}
			if got, want := res["c0"].Env[deviceplugin.EnvVisibleDevices], e.card(1).UUID; got != want {
				t.Errorf("p runs with %s=%s, want card 1 (%s), as annotated", deviceplugin.EnvVisibleDevices, got, want)
			}
			e.podWatch.release()
			final := e.settle([]*corev1.Pod{pod})
			for _, b := range e.check([]admission{{pod: pod, results: res}}, final) {
				t.Error(b)
			}
		})
	}
}
