package extender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	apiruntime "k8s.io/apimachinery/pkg/runtime"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/test/util"
)

// BenchmarkFilterHandler is the extender's whole filter verb (decode,
// fit, answer) without the network, on 5,000 nodes of 8 × 32 GiB cards,
// for the ~500 names kube-scheduler sends each cycle at that size (its
// adaptive percentageOfNodesToScore): the CPU one GPU pod's scheduling
// cycle costs the extender. In TestSchedulingThroughput the filter's p50
// in the extender is several times this, the rest waiting for a core
// (docs/benchmarks.md).
func BenchmarkFilterHandler(b *testing.B) {
	var objs []apiruntime.Object
	var names []string
	for i := range 5000 {
		n := fmt.Sprintf("node-%05d", i)
		objs = append(objs, util.MakeNode(n).Host("96", "512Gi").Cards("V100", 32, 32, 32, 32, 32, 32, 32, 32).Obj())
		if i%10 == 0 {
			names = append(names, n)
		}
	}
	f := newFixture(b, objs...)
	body := []byte(extenderArgs(b, util.MakePod("incoming").GPUMem(4).Requests("1", "1Gi").Obj(), names...))
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, Prefix+"/filter", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		f.handler.ServeHTTP(w, req)
		var res extenderv1.ExtenderFilterResult
		if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.Error != "" || res.NodeNames == nil || len(*res.NodeNames) == 0 {
			b.Fatalf("filter answered %d %s (decode error %v)", w.Code, w.Body.String(), err)
		}
	}
}
