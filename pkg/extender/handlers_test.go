package extender

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/feed"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/preemption"
	"github.com/gpushare/gpushare/test/util"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fixture is an extender over a fake API with three nodes: mixed (cards of
// 16 and 80 GiB, 10 GiB used on the 16), sick (two 16 GiB cards, card 0
// unhealthy, 9 GiB used on card 1) and nogpu; and a pending pod "pending".
type fixture struct {
	client  *fake.Clientset
	cache   *cache.Cache
	feeder  *feed.Feeder
	logger  klog.Logger
	cfg     HandlersConfig // what h was built from
	h       *Handlers
	handler http.Handler // h.Router()
	// preemptor is h's, when startPreemptor gave it one, writing to
	// preemptAPI.
	preemptor  *preemption.Preemptor
	preemptAPI preemption.API
}

func newFixture(t testing.TB, objs ...runtime.Object) *fixture {
	t.Helper()
	// A fuzz target may not log through its *testing.F, and a benchmark's
	// flood of refused requests would bury its results: they discard logs
	// (the zero logger).
	logger, ctx := klog.Logger{}, context.Background()
	if tt, ok := t.(*testing.T); ok {
		logger, ctx = ktesting.NewTestContext(tt)
	}
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	base := []runtime.Object{
		util.MakeNode("mixed").Cards("Tesla-T4", 16, 80).Obj(),
		util.MakeNode("sick").Cards("Tesla-T4", 16, 16).Unhealthy(0).Obj(),
		util.MakeNode("nogpu").Obj(),
		util.MakePod("pending").GPUMem(4).Obj(),
		util.MakePod("halfsick").GPUMem(9).Node("sick").Allocation(&gpushare.Allocation{Node: "sick", Unit: "GiB",
			Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 1, UUID: "GPU-sick-1", Units: 9}}}}}).Obj(),
		util.MakePod("running").GPUMem(10).Node("mixed").Allocation(&gpushare.Allocation{Node: "mixed", Unit: "GiB",
			Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, UUID: "GPU-mixed-0", Units: 10}}}}}).Obj(),
	}
	client := fake.NewClientset(append(base, objs...)...)
	// The fake tracker does not implement pods/binding: set spec.nodeName
	// and merge the Binding's annotations as the API server does, refusing
	// a second binding.
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ca, ok := a.(k8stesting.CreateAction)
		if !ok || ca.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := ca.GetObject().(*corev1.Binding)
		obj, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("pods"), b.Namespace, b.Name)
		if err != nil {
			return true, nil, err
		}
		pod := obj.(*corev1.Pod).DeepCopy()
		if pod.Spec.NodeName != "" {
			return true, nil, apierrorsConflict(pod)
		}
		pod.Spec.NodeName = b.Target.Name
		if pod.Annotations == nil {
			pod.Annotations = map[string]string{}
		}
		for k, v := range b.Annotations {
			pod.Annotations[k] = v
		}
		return true, nil, client.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), pod, pod.Namespace)
	})
	c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	feeder, err := feed.New(ctx, c, client)
	if err != nil {
		t.Fatal(err)
	}
	feeder.Start(ctx)
	if !feeder.WaitForSync(ctx) {
		t.Fatal("not synced")
	}
	clk := clocktesting.NewFakeClock(time.Unix(1700000000, 0))
	b, err := NewBinder(BinderConfig{Cache: c, API: ClientPodAPI{Client: client}, Pods: feeder, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{client: client, cache: c, feeder: feeder, logger: logger,
		cfg: HandlersConfig{Placer: c, Viewer: c, Binder: b, Ready: feeder.Synced}}
	f.configure(t, func(*HandlersConfig) {})
	return f
}

// configure rebuilds f's handlers from its configuration changed by change.
func (f *fixture) configure(tb testing.TB, change func(*HandlersConfig)) {
	tb.Helper()
	change(&f.cfg)
	f.h = newHandlers(tb, f.logger, f.cfg)
	f.handler = f.h.Router()
}

// newHandlers is NewHandlers, failing tb on an error.
func newHandlers(tb testing.TB, logger klog.Logger, cfg HandlersConfig) *Handlers {
	tb.Helper()
	h, err := NewHandlers(logger, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

// do sends body to path and returns the status and the indented response.
func (f *fixture) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	f.handler.ServeHTTP(rec, req)
	var out bytes.Buffer
	if err := json.Indent(&out, bytes.TrimSpace(rec.Body.Bytes()), "", "  "); err != nil {
		return rec.Code, rec.Body.String()
	}
	return rec.Code, out.String() + "\n"
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	util.Golden(t, name, got, *update)
}

func extenderArgs(t testing.TB, pod *corev1.Pod, nodes ...string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"Pod": pod, "NodeNames": nodes})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// wholeNodesArgs is a filter request as a scheduler without
// nodeCacheCapable sends it: whole Nodes, no NodeNames.
func wholeNodesArgs(t *testing.T, pod *corev1.Pod, nodes ...string) string {
	t.Helper()
	list := corev1.NodeList{}
	for _, n := range nodes {
		list.Items = append(list.Items, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{"zone": "a"}}})
	}
	b, err := json.Marshal(map[string]any{"Pod": pod, "Nodes": list})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestWireGolden(t *testing.T) {
	negative := util.MakePod("neg").GPUMem(1).Obj()
	negative.Spec.Containers[0].Resources.Limits[gpushare.ResourceGPUMem] = *resourceQuantity("-2")
	negative.Spec.Containers[0].Resources.Requests[gpushare.ResourceGPUMem] = *resourceQuantity("-2")
	tests := []struct {
		name, method, path string
		body               func(t *testing.T) string
		wantStatus         int
		filterAll          bool
	}{
		// Some node fits: the others' reasons stay out of the reply.
		{"filter-fit", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("train").GPUMem(12).Obj(), "mixed", "sick", "nogpu", "ghost")
		}, 200, false},
		// None fits: each node's reason, for kube-scheduler's event.
		{"filter-reasons", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("train").GPUMem(12).Obj(), "sick", "nogpu", "ghost")
		}, 200, false},
		{"filter-best", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("small").GPUMem(4).Obj(), "mixed", "sick", "nogpu")
		}, 200, false},
		{"filter-all", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("small").GPUMem(4).Obj(), "mixed", "sick", "nogpu")
		}, 200, true},
		{"filter-whole-nodes", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return wholeNodesArgs(t, util.MakePod("small").GPUMem(4).Obj(), "mixed", "sick", "nogpu")
		}, 200, false},
		{"filter-all-whole-nodes", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return wholeNodesArgs(t, util.MakePod("small").GPUMem(4).Obj(), "mixed", "sick", "nogpu", "ghost")
		}, 200, true},
		{"filter-too-big", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("huge").GPUMem(100).Obj(), "mixed", "sick")
		}, 200, false},
		{"filter-multi-container", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("duo").GPUMem(8).GPUMem(8).Obj(), "mixed", "sick")
		}, 200, false},
		{"filter-no-gpu-mem", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("cpu").Container("x").Obj(), "mixed")
		}, 200, false},
		{"filter-negative", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return extenderArgs(t, negative, "mixed")
		}, 200, false},
		{"filter-no-pod", "POST", "/gpushare-scheduler/filter", func(*testing.T) string { return `{"NodeNames":["mixed"]}` }, 200, false},
		{"filter-malformed", "POST", "/gpushare-scheduler/filter", func(*testing.T) string { return `{"Pod": [` }, 200, false},
		{"filter-bad-policy", "POST", "/gpushare-scheduler/filter", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("p").GPUMem(1).Annotation(gpushare.AnnotationPolicy, "worstfit").Obj(), "mixed")
		}, 200, false},
		{"prioritize-binpack", "POST", "/gpushare-scheduler/prioritize", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("small").GPUMem(4).Obj(), "mixed", "sick")
		}, 200, false},
		{"prioritize-spread", "POST", "/gpushare-scheduler/prioritize", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("small").GPUMem(4).Annotation(gpushare.AnnotationPolicy, "spread").Obj(), "mixed", "sick")
		}, 200, false},
		{"prioritize-malformed", "POST", "/gpushare-scheduler/prioritize", func(*testing.T) string { return `{"Pod": [` }, 400, false},
		{"prioritize-no-gpu-mem", "POST", "/gpushare-scheduler/prioritize", func(t *testing.T) string {
			return extenderArgs(t, util.MakePod("cpu").Container("x").Obj(), "mixed", "sick")
		}, 200, false},
		{"prioritize-negative", "POST", "/gpushare-scheduler/prioritize", func(t *testing.T) string {
			return extenderArgs(t, negative, "mixed")
		}, 400, false},
		{"bind-unknown-node", "POST", "/gpushare-scheduler/bind", func(*testing.T) string {
			return `{"PodName":"pending","PodNamespace":"default","PodUID":"uid-pending","Node":"ghost"}`
		}, 200, false},
		{"bind-bound-elsewhere", "POST", "/gpushare-scheduler/bind", func(*testing.T) string {
			return `{"PodName":"running","PodNamespace":"default","PodUID":"uid-running","Node":"sick"}`
		}, 200, false},
		{"bind-missing-fields", "POST", "/gpushare-scheduler/bind", func(*testing.T) string { return `{"PodName":"x"}` }, 200, false},
		{"inspect-all", "GET", "/gpushare-scheduler/inspect", func(*testing.T) string { return "" }, 200, false},
		{"inspect-unknown", "GET", "/gpushare-scheduler/inspect/ghost", func(*testing.T) string { return "" }, 404, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.filterAll {
				f.configure(t, func(c *HandlersConfig) { c.FilterAll = true })
			}
			body := tc.body(t)
			if *update && tc.method == "POST" {
				var pretty bytes.Buffer
				if json.Indent(&pretty, []byte(body), "", "  ") == nil {
					_ = os.WriteFile(filepath.Join("testdata", tc.name+".request.json"), append(pretty.Bytes(), '\n'), 0o644)
				}
			}
			status, got := f.do(t, tc.method, tc.path, body)
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d; body %s", status, tc.wantStatus, got)
			}
			golden(t, tc.name+".response.json", got)
		})
	}
}

// TestPrioritizeCPUOnlyPod: kube-scheduler's configuration sends the
// extender's prioritize every pod, and a pod that asks no gpu-mem gets 10
// where its CPU strands no GPU memory and 0 elsewhere (fragaware's
// CPUScorer). A placed pod of 16 GiB and 6 cores (bound to a node not
// scored) makes such requests typical: mixed (8 cores, 6 + 80 GiB free) has cards for 5 of them but CPU
// for 1, and none once a 4-core pod is there; sick's one healthy card has
// 7 GiB free, so it strands nothing; nogpu and a node the extender does not
// know have no cards to strand.
func TestPrioritizeCPUOnlyPod(t *testing.T) {
	learner := util.MakePod("learner").GPUMem(16).Requests("6", "1Gi").Node("elsewhere").Obj()
	f := newFixture(t, learner)
	pod := util.MakePod("cpu").Container("x").Requests("4", "1Gi").Annotation(gpushare.AnnotationPolicy, allocator.NameFragAware).Obj()
	status, got := f.do(t, "POST", "/gpushare-scheduler/prioritize", extenderArgs(t, pod, "mixed", "sick", "nogpu", "ghost"))
	if status != http.StatusOK {
		t.Fatalf("status %d: %s", status, got)
	}
	var scores extenderv1.HostPriorityList
	if err := json.Unmarshal([]byte(got), &scores); err != nil {
		t.Fatal(err)
	}
	want := extenderv1.HostPriorityList{{Host: "mixed", Score: 0}, {Host: "sick", Score: 10}, {Host: "nogpu", Score: 10}, {Host: "ghost", Score: 10}}
	if diff := cmp.Diff(want, scores); diff != "" {
		t.Errorf("scores (-want +got):\n%s", diff)
	}
}

func TestBindWritesAnnotationsAndIsIdempotent(t *testing.T) {
	ctx := context.Background()
	pod := util.MakePod("train").GPUMem(6).Obj()
	f := newFixture(t, pod)
	body := `{"PodName":"train","PodNamespace":"default","PodUID":"uid-train","Node":"mixed"}`
	for i := range 2 { // the second is a retried bind
		if _, got := f.do(t, "POST", "/gpushare-scheduler/bind", body); got != "{\n  \"Error\": \"\"\n}\n" {
			t.Fatalf("bind #%d = %s", i, got)
		}
	}
	got, err := f.client.CoreV1().Pods("default").Get(ctx, "train", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.NodeName != "mixed" {
		t.Errorf("nodeName = %q, want mixed", got.Spec.NodeName)
	}
	wantAnn := map[string]string{
		gpushare.AnnotationAllocation: `{"node":"mixed","unit":"GiB","containers":[{"name":"c0","devices":[{"index":0,"uuid":"GPU-mixed-0","units":6}]}]}`,
		gpushare.AnnotationIndex:      "0",
		gpushare.AnnotationPodMem:     "6",
		gpushare.AnnotationDevMem:     "16",
		gpushare.AnnotationAssigned:   "false",
		gpushare.AnnotationAssumeTime: "1700000000000000000",
	}
	if diff := cmp.Diff(wantAnn, got.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	views, _ := f.cache.Inspect("mixed")
	if used := views[0].Cards[0].Used; used != 16 {
		t.Errorf("card 0 used = %d after two binds, want 16 (10 running + 6 once)", used)
	}
}

func TestBindFailureReleasesCards(t *testing.T) {
	pod := util.MakePod("train").GPUMem(6).Obj()
	f := newFixture(t, pod)
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			return true, nil, errorsInternal("etcd is down")
		}
		return false, nil, nil
	})
	_, got := f.do(t, "POST", "/gpushare-scheduler/bind", `{"PodName":"train","PodNamespace":"default","PodUID":"uid-train","Node":"mixed"}`)
	if !strings.Contains(got, "etcd is down") {
		t.Errorf("bind reply = %s, want the API error", got)
	}
	// Bind forgets the assumption before it replies: the cards are free
	// at once.
	views, _ := f.cache.Inspect("mixed")
	if used := views[0].Cards[0].Used; used != 10 {
		t.Errorf("card 0 used = %d after a failed bind, want 10", used)
	}
	p, _ := f.client.CoreV1().Pods("default").Get(context.Background(), "train", metav1.GetOptions{})
	if _, ok := p.Annotations[gpushare.AnnotationAllocation]; ok {
		t.Errorf("failed bind left its allocation annotation: %v", p.Annotations)
	}
}

func TestHealthAndReady(t *testing.T) {
	f := newFixture(t)
	for _, path := range []string{"/healthz", "/readyz"} {
		if status, body := f.do(t, "GET", path, ""); status != 200 || body != "ok" {
			t.Errorf("GET %s = %d %q", path, status, body)
		}
	}
	if status, body := f.do(t, "GET", "/version", ""); status != 200 || !strings.Contains(body, "version") {
		t.Errorf("GET /version = %d %q", status, body)
	}
	if status, body := f.do(t, "GET", "/metrics", ""); status != 200 || !strings.Contains(body, "gpushare_extender_nodes 3") {
		t.Errorf("GET /metrics = %d, missing node gauge", status)
	}
	// Not ready before sync: the verbs refuse rather than filter against
	// empty cards.
	h := newHandlers(t, ktestingLogger(t), HandlersConfig{Placer: f.cache, Viewer: f.cache, Ready: func() bool { return false }}).Router()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Errorf("unsynced /readyz = %d, want 503", rec.Code)
	}
	// Prioritize's reply has no error field: it says so with HTTP 400.
	for verb, wantCode := range map[string]int{"filter": 200, "bind": 200, "prioritize": 400} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", Prefix+"/"+verb, strings.NewReader(extenderArgs(t, util.MakePod("p").GPUMem(1).Obj(), "mixed"))))
		if rec.Code != wantCode || !strings.Contains(rec.Body.String(), "informer caches not synced") {
			t.Errorf("unsynced %s = %d %s, want %d and the reason", verb, rec.Code, rec.Body.String(), wantCode)
		}
	}
}

func TestOversizedBody(t *testing.T) {
	f := newFixture(t)
	// Just over the cap: refused with the reason, before decoding it all.
	big := `{"Pod":{"metadata":{"name":"` + strings.Repeat("x", MaxBodyBytes) + `"}}}`
	status, got := f.do(t, "POST", "/gpushare-scheduler/filter", big)
	if status != 200 || !strings.Contains(got, "request body is over 4194304 bytes") {
		t.Errorf("oversized filter = %d %s", status, got)
	}
}

// TestLargestFilterRequestFits: the cap holds the largest request a
// scheduler with nodeCacheCapable sends for 5,000 nodes: 5,000 names of the
// longest kind (253 characters) and a pod as large as etcd stores (1.5 MiB).
func TestLargestFilterRequestFits(t *testing.T) {
	f := newFixture(t)
	pod := util.MakePod("big").GPUMem(4).Annotation("bulk", strings.Repeat("y", 3<<19)).Obj()
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("%0253d", i)
	}
	names[0] = "mixed"
	body := extenderArgs(t, pod, names...)
	if len(body) > MaxBodyBytes {
		t.Fatalf("a %d-byte request is over the %d-byte cap", len(body), MaxBodyBytes)
	}
	// Of size, not speed: under -race on a busy machine decoding and
	// fitting this request can outlast the verb's 1.5 s deadline (seen
	// once); TestSearchSlots tests the deadline.
	f.configure(t, func(c *HandlersConfig) { c.VerbTimeout = time.Minute })
	status, got := f.do(t, "POST", "/gpushare-scheduler/filter", body)
	if status != 200 || strings.Contains(got, `"Error"`) && !strings.Contains(got, `"Error": ""`) {
		t.Errorf("largest filter request = %d %.300s", status, got)
	}
}

// blockingBinds makes the fixture's Bindings wait until release is closed.
func blockingBinds(f *fixture, release <-chan struct{}) {
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "binding" {
			<-release
		}
		return false, nil, nil
	})
}

// TestInFlightBound: past MaxInFlight verb requests at once, more wait only
// briefly, then get 503 with Retry-After (kube-scheduler retries the pod),
// so a flood cannot grow goroutines and memory without bound. With the
// default, the 65th concurrent request is the one refused.
func TestInFlightBound(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxInFlight int // 0: the default
		holding     int // binds that hold a slot
	}{
		{name: "two", maxInFlight: 2, holding: 2},
		{name: "default", holding: DefaultMaxInFlight},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pods []runtime.Object
			for i := range tc.holding + 1 {
				pods = append(pods, util.MakePod(fmt.Sprintf("p%d", i)).GPUMem(1).Obj())
			}
			f := newFixture(t, pods...)
			f.configure(t, func(c *HandlersConfig) { c.MaxInFlight = tc.maxInFlight })
			release := make(chan struct{})
			blockingBinds(f, release)
			srv := httptest.NewServer(f.h.Router())
			defer srv.Close()
			// The holding binds wait for release, which comes only after
			// the extra bind was answered: a refusal that waited for a slot
			// would never come, and its client's timeout says so. Both
			// timeouts are generous: on a loaded machine getting every
			// holder into its slot takes seconds.
			bind := func(i int, timeout time.Duration) (*http.Response, error) {
				body := fmt.Sprintf(`{"PodName":"p%d","PodNamespace":"default","PodUID":"uid-p%d","Node":"mixed"}`, i, i)
				client := &http.Client{Timeout: timeout}
				return client.Post(srv.URL+"/gpushare-scheduler/bind", "application/json", strings.NewReader(body))
			}
			done := make(chan int, tc.holding)
			for i := range tc.holding {
				go func() {
					resp, err := bind(i, 2*time.Minute)
					if err == nil {
						resp.Body.Close()
						done <- resp.StatusCode
						return
					}
					done <- 0
				}()
			}
			// Wait until all hold their slot.
			deadline := time.Now().Add(time.Minute)
			for f.h.inFlight() < tc.holding && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			if got := f.h.inFlight(); got != tc.holding {
				t.Fatalf("%d requests hold a slot, want %d", got, tc.holding)
			}
			resp, err := bind(tc.holding, 30*time.Second)
			if err != nil {
				t.Fatalf("bind %d: %v (it should be refused at once, not wait for a slot)", tc.holding+1, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
				t.Errorf("bind %d: %d Retry-After %q, want 503 with Retry-After", tc.holding+1, resp.StatusCode, resp.Header.Get("Retry-After"))
			}
			close(release)
			for range tc.holding {
				if code := <-done; code != http.StatusOK {
					t.Errorf("a bind holding a slot answered %d (0: no answer)", code)
				}
			}
		})
	}
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r    io.Reader
	read int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.read += n
	return n, err
}

// TestOversizedBodyNotRead: a request declaring a body over the cap is
// refused before any of it is read, so a flood of them costs no reading.
func TestOversizedBodyNotRead(t *testing.T) {
	f := newFixture(t)
	for _, verb := range []string{"filter", "bind"} {
		body := &countingReader{r: strings.NewReader(strings.Repeat("x", MaxBodyBytes+1))}
		req := httptest.NewRequest("POST", Prefix+"/"+verb, body)
		req.ContentLength = MaxBodyBytes + 1
		rec := httptest.NewRecorder()
		f.handler.ServeHTTP(rec, req)
		if !strings.Contains(rec.Body.String(), "request body is over 4194304 bytes") || body.read != 0 {
			t.Errorf("%s: %d %s after reading %d bytes; want the refusal before reading", verb, rec.Code, rec.Body.String(), body.read)
		}
	}
}

// TestSearchSlots: while every slot for pods whose cards need a search is
// taken, such a pod's filter waits and, at its deadline, answers an error
// naming the wait, and its prioritize likewise; a pod of one container on
// one card needs no slot and is answered at once.
func TestSearchSlots(t *testing.T) {
	f := newFixture(t)
	f.configure(t, func(c *HandlersConfig) { c.VerbTimeout = 200 * time.Millisecond })
	for range cap(f.h.searchSlots) {
		f.h.searchSlots <- struct{}{}
	}
	two := util.MakePod("two").GPUMem(2).GPUMem(2).Obj()
	for _, verb := range []string{"filter", "prioritize"} {
		_, got := f.do(t, "POST", "/gpushare-scheduler/"+verb, extenderArgs(t, two, "mixed"))
		if !strings.Contains(got, "waited for one of the") || !strings.Contains(got, "filter deadline") && !strings.Contains(got, "prioritize deadline") {
			t.Errorf("%s of a two-container pod with every search slot taken: %s", verb, got)
		}
	}
	status, got := f.do(t, "POST", "/gpushare-scheduler/filter", extenderArgs(t, util.MakePod("one").GPUMem(2).Obj(), "mixed"))
	var res extenderv1.ExtenderFilterResult
	if err := json.Unmarshal([]byte(got), &res); status != http.StatusOK || err != nil || res.Error != "" || res.NodeNames == nil || len(*res.NodeNames) != 1 {
		t.Errorf("filter of a one-card pod with every search slot taken: %d %s", status, got)
	}
	for range cap(f.h.searchSlots) {
		<-f.h.searchSlots
	}
	_, got = f.do(t, "POST", "/gpushare-scheduler/filter", extenderArgs(t, two, "mixed"))
	if err := json.Unmarshal([]byte(got), &res); err != nil || res.Error != "" || res.NodeNames == nil || len(*res.NodeNames) != 1 {
		t.Errorf("filter of a two-container pod with the slots free: %s", got)
	}
}
