package extender

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
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
		if res.Error == "" && res.NodeNames == nil {
			t.Fatalf("no error and no node names for %q", body)
		}
		after, _ := fx.cache.Inspect("")
		if diff := cmp.Diff(before, after); diff != "" {
			t.Fatalf("filter changed the cache:\n%s", diff)
		}
	})
}

func FuzzBindBody(f *testing.F) {
	for _, s := range []string{
		`{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending","Node":"mixed"}`,
		`{"PodName":"pending","PodNamespace":"default","PodUID":"other","Node":"mixed"}`,
		`{"PodName":"running","PodNamespace":"default","Node":"sick"}`,
		`{"PodName":"nope","PodNamespace":"default","Node":"mixed"}`,
		`{"PodName":1}`, `{`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		fx := newFixture(t)
		rec := httptest.NewRecorder()
		fx.handler.ServeHTTP(rec, httptest.NewRequest("POST", Prefix+"/bind", strings.NewReader(body)))
		if rec.Code != 200 {
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		var res extenderv1.ExtenderBindingResult
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			t.Fatalf("reply is not an ExtenderBindingResult: %v", err)
		}
		// Whatever happened, no card is over its size.
		views, _ := fx.cache.Inspect("")
		for _, n := range views {
			for _, c := range n.Cards {
				if c.Used > c.Total {
					t.Fatalf("node %s card %d over-committed: %d of %d", n.Name, c.Index, c.Used, c.Total)
				}
			}
		}
	})
}
