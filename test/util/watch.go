package util

import (
	"net/http"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// WatchGap stands between a fake clientset and the informers watching one
// resource: changes made through the clientset reach no informer until
// Expire ends every open watch with "410 Gone: too old resource version",
// as kube-apiserver ends a watch whose client fell too far behind. The
// reflector then lists again and the informer reconciles the list with its
// store, which is the path a real watch gap takes: a pod deleted and
// re-created under the same name arrives as one update, old UID to new.
type WatchGap struct {
	mu       sync.Mutex
	watchers []*watch.RaceFreeFakeWatcher
}

// NewWatchGap installs a WatchGap on client's watches of resource (e.g.
// "pods"). Call it before any informer starts.
func NewWatchGap(client *fake.Clientset, resource string) *WatchGap {
	g := &WatchGap{}
	client.PrependWatchReactor(resource, func(k8stesting.Action) (bool, watch.Interface, error) {
		w := watch.NewRaceFreeFake()
		g.mu.Lock()
		g.watchers = append(g.watchers, w)
		g.mu.Unlock()
		return true, w, nil
	})
	return g
}

// Expire ends every open watch with 410 Gone. An informer may report
// synced before it opens its watch, so Expire first waits (up to 10 s) for
// one to be open; it returns false if none opened.
func (g *WatchGap) Expire() bool {
	var ws []*watch.RaceFreeFakeWatcher
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		g.mu.Lock()
		ws = g.watchers
		if len(ws) > 0 {
			g.watchers = nil
		}
		g.mu.Unlock()
		if len(ws) > 0 {
			break
		}
		if time.Now().After(deadline) {
			return false
		}
	}
	gone := &metav1.Status{Status: metav1.StatusFailure, Code: http.StatusGone, Reason: metav1.StatusReasonExpired, Message: "too old resource version"}
	for _, w := range ws {
		w.Error(runtime.Object(gone))
	}
	return true
}
