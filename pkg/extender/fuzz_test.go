package extender

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// The HTTP decoders take anything: every body gets HTTP 200 with a JSON
// reply of the verb's type, and a filter never changes the cache.

func FuzzFilterBody(f *testing.F) {
	for _, s := range []string{
		`{"Pod":{"metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"8"}}}]}},"NodeNames":["mixed","sick","ghost"]}`,
		`{"Pod":{"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"-1"}}}]}},"NodeNames":null}`,
		`{"Pod":{"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"4","aliyun.com/gpu-count":"0"}}}]}},"Nodes":{"items":[{"metadata":{"name":"mixed"}}]}}`,
		`{"Pod":null}`, `{`, `null`, `[]`, ``,
	} {
		f.Add(s)
	}
	fx := newFixture(f) // shared: filter must not mutate it
	before, _ := fx.cache.Inspect("")
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		fx.handler.ServeHTTP(rec, httptest.NewRequest("POST", Prefix+"/filter", strings.NewReader(body)))
		if rec.Code != 200 {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		var res extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatalf("reply is not an ExtenderFilterResult: %v", err)
		}
		if res.Error == "" && res.NodeNames == nil && res.Nodes == nil {
			t.Fatalf("no error and no nodes for %q", body)
		}
		// A scheduler without nodeCacheCapable sends Nodes and reads only
		// Nodes back.
		var args extenderv1.ExtenderArgs
		if res.Error == "" && json.Unmarshal([]byte(body), &args) == nil && args.NodeNames == nil && args.Nodes != nil && res.Nodes == nil {
			t.Fatalf("request carried Nodes, reply has none for %q", body)
		}
		after, _ := fx.cache.Inspect("")
		if diff := cmp.Diff(before, after); diff != "" {
			t.Fatalf("filter changed the cache:\n%s", diff)
		}
	})
}

// FuzzPrioritizeBody: any body gets 200 with a score in 0..10 for each
// node asked, in order, or 400 with the reason (HostPriorityList has no
// error field), and the cache is unchanged.
func FuzzPrioritizeBody(f *testing.F) {
	for _, s := range []string{
		`{"Pod":{"metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"8"}}}]}},"NodeNames":["mixed","sick","ghost"]}`,
		`{"Pod":{"metadata":{"annotations":{"gpushare.io/policy":"spread"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"4"}}}]}},"NodeNames":["mixed","mixed"]}`,
		`{"Pod":{"metadata":{"annotations":{"gpushare.io/policy":"nope"}},"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"4"}}}]}},"NodeNames":["mixed"]}`,
		`{"Pod":{"spec":{"containers":[{"name":"c","resources":{"limits":{"aliyun.com/gpu-mem":"4"}}}]}},"Nodes":{"items":[{"metadata":{"name":"sick"}}]}}`,
		`{"Pod":null}`, `{`, `null`, ``,
	} {
		f.Add(s)
	}
	fx := newFixture(f)
	before, _ := fx.cache.Inspect("")
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder()
		fx.handler.ServeHTTP(rec, httptest.NewRequest("POST", Prefix+"/prioritize", strings.NewReader(body)))
		switch rec.Code {
		case http.StatusOK:
			var res extenderv1.HostPriorityList
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
				t.Fatalf("reply is not a HostPriorityList: %v", err)
			}
			var args extenderv1.ExtenderArgs
			if err := json.Unmarshal([]byte(body), &args); err != nil {
				t.Fatalf("200 for a body that does not decode: %q", body)
			}
			for i, hp := range res {
				if hp.Score < 0 || hp.Score > extenderv1.MaxExtenderPriority {
					t.Fatalf("score %d for %s out of 0..%d", hp.Score, hp.Host, extenderv1.MaxExtenderPriority)
				}
				if args.NodeNames != nil && (i >= len(*args.NodeNames) || (*args.NodeNames)[i] != hp.Host) {
					t.Fatalf("reply's hosts %v are not the request's %v", res, *args.NodeNames)
				}
			}
		case http.StatusBadRequest:
			var e map[string]string
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e["error"] == "" {
				t.Fatalf("400 without a reason: %q", rec.Body.String())
			}
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		after, _ := fx.cache.Inspect("")
		if diff := cmp.Diff(before, after); diff != "" {
			t.Fatalf("prioritize changed the cache:\n%s", diff)
		}
	})
}

// podsAPI is an in-memory PodAPI over several pods, applying a Binding
// as the API server does.
type podsAPI map[string]*corev1.Pod // name -> pod, namespace "default"

func (a podsAPI) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	p, ok := a[name]
	if !ok || ns != "default" {
		return nil, apierrors.NewNotFound(corev1.Resource("pods"), name)
	}
	return p.DeepCopy(), nil
}

func (a podsAPI) Bind(_ context.Context, ns, name string, uid types.UID, node string, ann map[string]string) error {
	p, ok := a[name]
	switch {
	case !ok || ns != "default":
		return apierrors.NewNotFound(corev1.Resource("pods"), name)
	case p.UID != uid || p.Spec.NodeName != "":
		return apierrors.NewConflict(corev1.Resource("pods/binding"), name, errors.New("precondition failed"))
	}
	p.Spec.NodeName = node
	for k, v := range ann {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
	return nil
}

// bindFixture is the fixture's cluster without informers, so that a fuzz
// input costs microseconds: a cache seeded directly, pods in memory.
func bindFixture(t *testing.T) (http.Handler, *cache.Cache) {
	t.Helper()
	c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []*corev1.Node{
		util.MakeNode("mixed").Cards("Tesla-T4", 16, 80).Obj(),
		util.MakeNode("sick").Cards("Tesla-T4", 16, 16).Unhealthy(0).Obj(),
	} {
		if err := c.SetNode(n); err != nil {
			t.Fatal(err)
		}
	}
	running := util.MakePod("running").GPUMem(10).Node("mixed").Allocation(&gpushare.Allocation{Node: "mixed", Unit: "GiB",
		Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, UUID: "GPU-mixed-0", Units: 10}}}}}).Obj()
	api := podsAPI{"running": running, "pending": util.MakePod("pending").GPUMem(4).Obj(), "huge": util.MakePod("huge").GPUMem(100).Obj()}
	for _, p := range api {
		c.UpsertPod(p)
	}
	b, err := NewBinder(BinderConfig{Cache: c, API: api, Pods: noCache{}})
	if err != nil {
		t.Fatal(err)
	}
	return newHandlers(t, klog.Background().V(1), HandlersConfig{Placer: c, Viewer: c, Binder: b, Ready: func() bool { return true }}).Router(), c
}

func FuzzBindBody(f *testing.F) {
	for _, s := range []string{
		`{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending","Node":"mixed"}`,
		`{"PodName":"pending","PodNamespace":"default","PodUID":"other","Node":"mixed"}`,
		`{"PodName":"huge","PodNamespace":"default","PodUID":"uid-huge","Node":"mixed"}`,
		`{"PodName":"running","PodNamespace":"default","Node":"sick"}`,
		`{"PodName":"nope","PodNamespace":"default","Node":"mixed"}`,
		`{"PodName":1}`, `{`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		handler, c := bindFixture(t)
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest("POST", Prefix+"/bind", strings.NewReader(body)))
		if rec.Code != 200 {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		var res extenderv1.ExtenderBindingResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatalf("reply is not an ExtenderBindingResult: %v", err)
		}
		// Whatever happened, no card is over its size.
		views, _ := c.Inspect("")
		for _, n := range views {
			for _, card := range n.Cards {
				if card.Used > card.Total {
					t.Fatalf("node %s card %d over-committed: %d of %d", n.Name, card.Index, card.Used, card.Total)
				}
			}
		}
	})
}
