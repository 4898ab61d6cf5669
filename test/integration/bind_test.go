package integration

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// lossyTransport lets requests reach the API server and then, while armed,
// drops the answer of the first Binding and fails the reads of pods that
// follow it: the Binding is made, the binder cannot learn it.
type lossyTransport struct {
	next http.RoundTripper
	// loseBindings: answers of Bindings still to lose; readsAfterLoss: how
	// many GETs of pods fail after a lost answer; failReads: those left.
	loseBindings, readsAfterLoss, failReads atomic.Int32
}

func (l *lossyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/pods/") && l.failReads.Add(-1) >= 0 {
		return nil, errors.New("test: the API server cannot be reached for this read")
	}
	resp, err := l.next.RoundTrip(req)
	if err == nil && req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/binding") && l.loseBindings.Add(-1) >= 0 {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		l.failReads.Store(l.readsAfterLoss.Load())
		return nil, errors.New("test: the answer of this Binding is lost")
	}
	return resp, err
}

// TestBindAnswerLost: the API server makes a Binding whose answer never
// reaches the extender. The cards must stay held (read back as bound, or
// kept while the pod cannot be read), so a second pod is not placed on
// the same full card.
func TestBindAnswerLost(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	for _, tc := range []struct {
		name      string
		failReads int32
		wantErr   string
	}{
		{name: "read back as bound"},
		{name: "pod cannot be read back", failReads: 3, wantErr: "stay held"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			cp := framework.StartT(t, framework.Options{})
			admin := cp.Client(framework.AdminUser)
			if err := createNode(ctx, admin, util.MakeNode("n1").Cards("T4", 16).Obj()); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"p", "q"} {
				pod := util.MakePod(name).GPUMem(16).Obj()
				pod.UID = ""
				if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			// The cache hears of nothing but the binder's own decisions:
			// the window before the informer delivers the bound pod, held
			// open. Pods are read from the API.
			c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
			if err != nil {
				t.Fatal(err)
			}
			node, err := admin.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.SetNode(node); err != nil {
				t.Fatal(err)
			}
			cfg := cp.RESTConfig(framework.AdminUser)
			lossy := &lossyTransport{}
			cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { lossy.next = rt; return lossy }
			b, err := extender.NewBinder(extender.BinderConfig{Cache: c, API: extender.ClientPodAPI{Client: kubernetes.NewForConfigOrDie(cfg)}, Pods: noInformer{}})
			if err != nil {
				t.Fatal(err)
			}

			uid := func(name string) string {
				p, err := admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				return string(p.UID)
			}
			lossy.loseBindings.Store(1)
			lossy.readsAfterLoss.Store(tc.failReads)
			err = b.Bind(ctx, "default", "p", types.UID(uid("p")), "n1")
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("Bind(p) = %v, want %q", err, tc.wantErr)
			}
			p, err := admin.CoreV1().Pods("default").Get(ctx, "p", metav1.GetOptions{})
			if err != nil || p.Spec.NodeName != "n1" {
				t.Fatalf("p after its bind: node %q, %v; the API server should have made the Binding", p.Spec.NodeName, err)
			}
			// The card is p's: q must not get it.
			if err := b.Bind(ctx, "default", "q", types.UID(uid("q")), "n1"); err == nil {
				q, _ := admin.CoreV1().Pods("default").Get(ctx, "q", metav1.GetOptions{})
				t.Fatalf("q was bound to %s on the card p holds: 32 GiB on a 16 GiB card", q.Spec.NodeName)
			}
			var q corev1.Pod
			if p, err := admin.CoreV1().Pods("default").Get(ctx, "q", metav1.GetOptions{}); err == nil {
				q = *p
			}
			if q.Spec.NodeName != "" {
				t.Errorf("q bound to %s", q.Spec.NodeName)
			}
		})
	}
}

// noInformer is an informer cache that has not delivered any pod yet.
type noInformer struct{}

func (noInformer) Pod(_, _ string) (*kubeinfo.PodInfo, bool) { return nil, false }
