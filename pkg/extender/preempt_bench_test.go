package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/test/util"
)

// noopPreemptAPI writes nothing.
type noopPreemptAPI struct{}

func (noopPreemptAPI) Nominate(context.Context, string, string, types.UID, string) error { return nil }
func (noopPreemptAPI) Evict(context.Context, string, string, types.UID) error            { return nil }

// unschedulableCases are the pods and preemptor settings the D2
// benchmarks filter: no preemptor; a pod of priority 0, which can evict
// nobody; a pod of priority 1000 asking 17 GiB, which no card can ever
// hold, so each of its plans looks at every pod of the 500 nodes and
// finds nothing.
var unschedulableCases = []struct {
	name      string
	preemptor bool
	units     int64
	priority  int32
}{
	{"preemption=off", false, 14, 0},
	{"preemption=on/priority=0", true, 14, 0},
	{"preemption=on/priority=1000", true, 17, 1000},
}

// BenchmarkFilterUnschedulable is the filter verb (decode, fit, answer,
// and whatever a preemption adds to it) for a GPU pod that fits none of
// the 500 nodes of util.PreemptionCluster, without the network, once the
// first filter's plan (off the reply) is done: what kube-scheduler waits
// for in each of the pod's retries. The plan itself:
// BenchmarkPlanUnschedulable (pkg/preemption).
func BenchmarkFilterUnschedulable(b *testing.B) {
	objs, names := util.PreemptionCluster()
	for _, tc := range unschedulableCases {
		b.Run(tc.name, func(b *testing.B) {
			f := newFixture(b, objs...)
			if tc.preemptor {
				startPreemptor(b, f, noopPreemptAPI{})
			}
			body := []byte(extenderArgs(b, util.MakePod("pending").GPUMem(tc.units).Priority(tc.priority).GPUModels("A10").Obj(), names...))
			serve := func() *httptest.ResponseRecorder {
				req := httptest.NewRequest(http.MethodPost, Prefix+"/filter", bytes.NewReader(body))
				w := httptest.NewRecorder()
				f.handler.ServeHTTP(w, req)
				return w
			}
			serve()
			settle(b, f) // the first filter's plan, if any, done
			b.ReportAllocs()
			for b.Loop() {
				checkNoFit(b, serve().Body.Bytes())
			}
		})
	}
}

// BenchmarkFilterUnschedulableHTTP is BenchmarkFilterUnschedulable over
// HTTP on loopback, one request at a time as kube-scheduler sends them,
// reporting the answer's p50 and p99 (milliseconds) besides the mean.
func BenchmarkFilterUnschedulableHTTP(b *testing.B) {
	objs, names := util.PreemptionCluster()
	for _, tc := range unschedulableCases {
		b.Run(tc.name, func(b *testing.B) {
			f := newFixture(b, objs...)
			if tc.preemptor {
				startPreemptor(b, f, noopPreemptAPI{})
			}
			srv := httptest.NewServer(f.handler)
			b.Cleanup(srv.Close)
			body := []byte(extenderArgs(b, util.MakePod("pending").GPUMem(tc.units).Priority(tc.priority).GPUModels("A10").Obj(), names...))
			if resp, err := srv.Client().Post(srv.URL+Prefix+"/filter", "application/json", bytes.NewReader(body)); err == nil {
				_ = resp.Body.Close()
			}
			settle(b, f)
			var lat util.Latencies
			for b.Loop() {
				start := time.Now()
				resp, err := srv.Client().Post(srv.URL+Prefix+"/filter", "application/json", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				var buf bytes.Buffer
				_, err = buf.ReadFrom(resp.Body)
				_ = resp.Body.Close()
				lat.Add(time.Since(start))
				if err != nil {
					b.Fatal(err)
				}
				checkNoFit(b, buf.Bytes())
			}
			b.ReportMetric(float64(lat.Quantile(0.5))/float64(time.Millisecond), "p50-ms")
			b.ReportMetric(float64(lat.Quantile(0.99))/float64(time.Millisecond), "p99-ms")
		})
	}
}

// checkNoFit fails b unless body is a filter answer that passes no node.
func checkNoFit(b *testing.B, body []byte) {
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal(body, &res); err != nil || res.Error != "" || res.NodeNames == nil || len(*res.NodeNames) != 0 {
		b.Fatalf("filter answered %s (decode error %v), want no node", body, err)
	}
}
