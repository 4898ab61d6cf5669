package webhook

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

var podsResource = metav1.GroupVersionResource{Version: "v1", Resource: "pods"}

// review encodes an AdmissionReview of op on resource carrying obj.
func review(t testing.TB, op admissionv1.Operation, res metav1.GroupVersionResource, sub string, obj any) string {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: "admission.k8s.io/v1", Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{UID: "req-1", Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Resource: res, SubResource: sub,
			Namespace: "default", Name: "p", Operation: op, Object: runtime.RawExtension{Raw: raw}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func newHandler(t testing.TB, logger klog.Logger) (*Handler, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	h, err := New(logger, DefaultSchedulerName, reg)
	if err != nil {
		t.Fatal(err)
	}
	return h, reg
}

func post(h http.Handler, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path, strings.NewReader(body)))
	return rec
}

func scheduler(name string) func(*corev1.Pod) *corev1.Pod {
	return func(p *corev1.Pod) *corev1.Pod { p.Spec.SchedulerName = name; return p }
}

func TestMutate(t *testing.T) {
	setPatch := `[{"op":"add","path":"/spec/schedulerName","value":"gpushare-scheduler"}]`
	requestOnly := util.MakePod("p").Container("c").Obj()
	requestOnly.Spec.Containers[0].Resources.Requests = corev1.ResourceList{gpushare.ResourceGPUMem: resource.MustParse("4")}
	tests := []struct {
		name       string
		op         admissionv1.Operation
		resource   metav1.GroupVersionResource
		sub        string
		obj        any
		wantPatch  string // "" for none
		wantResult string
	}{
		{name: "gpu-mem, no scheduler", obj: util.MakePod("p").GPUMem(4).Obj(), wantPatch: setPatch, wantResult: ResultMutated},
		{name: "gpu-mem, default scheduler", obj: scheduler(corev1.DefaultSchedulerName)(util.MakePod("p").GPUMem(4).Obj()), wantPatch: setPatch, wantResult: ResultMutated},
		{name: "gpu-mem in an init container only", obj: util.MakePod("p").InitGPUMem(8).Container("app").Obj(), wantPatch: setPatch, wantResult: ResultMutated},
		{name: "gpu-mem as a request only", obj: requestOnly, wantPatch: setPatch, wantResult: ResultMutated},
		{name: "an invalid gpu-mem request still goes to the gpushare scheduler, which says why", obj: util.MakePod("p").GPUMem(0).Obj(), wantPatch: setPatch, wantResult: ResultMutated},
		{name: "another scheduler chosen", obj: scheduler("my-scheduler")(util.MakePod("p").GPUMem(4).Obj()), wantResult: ResultSkipped},
		{name: "already ours", obj: scheduler(DefaultSchedulerName)(util.MakePod("p").GPUMem(4).Obj()), wantResult: ResultSkipped},
		{name: "no gpu-mem", obj: util.MakePod("p").Container("c").Obj(), wantResult: ResultSkipped},
		{name: "update", op: admissionv1.Update, obj: util.MakePod("p").GPUMem(4).Obj(), wantResult: ResultSkipped},
		{name: "a subresource", sub: "ephemeralcontainers", obj: util.MakePod("p").GPUMem(4).Obj(), wantResult: ResultSkipped},
		{name: "another resource", resource: metav1.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, obj: map[string]any{"spec": map[string]any{}}, wantResult: ResultSkipped},
		{name: "a pod that does not decode: allowed unchanged", obj: map[string]any{"spec": "not a pod spec"}, wantResult: ResultError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, reg := newHandler(t, ktestingLogger(t))
			op, res := tc.op, tc.resource
			if op == "" {
				op = admissionv1.Create
			}
			if res.Resource == "" {
				res = podsResource
			}
			rec := post(h, review(t, op, res, tc.sub, tc.obj))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
			if out.APIVersion != "admission.k8s.io/v1" || out.Kind != "AdmissionReview" || out.Response == nil {
				t.Fatalf("reply is not an AdmissionReview with a response: %s", rec.Body)
			}
			if out.Response.UID != "req-1" || !out.Response.Allowed {
				t.Errorf("response UID %q allowed %v; want req-1, allowed", out.Response.UID, out.Response.Allowed)
			}
			if diff := cmp.Diff(tc.wantPatch, string(out.Response.Patch)); diff != "" {
				t.Errorf("patch (-want +got):\n%s", diff)
			}
			if tc.wantPatch != "" && (out.Response.PatchType == nil || *out.Response.PatchType != admissionv1.PatchTypeJSONPatch) {
				t.Errorf("patch type %v, want JSONPatch", out.Response.PatchType)
			}
			if got := testutil.ToFloat64(h.admissions.WithLabelValues(tc.wantResult)); got != 1 {
				t.Errorf("gpushare_webhook_admissions_total{result=%q} = %v, want 1", tc.wantResult, got)
			}
			if n, err := testutil.GatherAndCount(reg, "gpushare_webhook_admissions_total"); err != nil || n != len(results) {
				t.Errorf("gpushare_webhook_admissions_total series = %d (%v), want %d", n, err, len(results))
			}
		})
	}
}

func TestMalformedReviews(t *testing.T) {
	valid := review(t, admissionv1.Create, podsResource, "", util.MakePod("p").GPUMem(4).Obj())
	tests := []struct{ name, body string }{
		{name: "not JSON", body: "{"},
		{name: "empty", body: ""},
		{name: "v1beta1", body: strings.Replace(valid, "admission.k8s.io/v1", "admission.k8s.io/v1beta1", 1)},
		{name: "another kind", body: strings.Replace(valid, `"kind":"AdmissionReview"`, `"kind":"Pod"`, 1)},
		{name: "no request", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`},
		{name: "no request UID", body: strings.Replace(valid, `"uid":"req-1"`, `"uid":""`, 1)},
		{name: "too big", body: `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","name":"` + strings.Repeat("a", MaxBodyBytes) + `"}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newHandler(t, ktestingLogger(t))
			if rec := post(h, tc.body); rec.Code != http.StatusBadRequest {
				t.Errorf("status %d, want 400: %s", rec.Code, rec.Body)
			}
			if got := testutil.ToFloat64(h.admissions.WithLabelValues(ResultInvalid)); got != 1 {
				t.Errorf("invalid reviews counted %v, want 1", got)
			}
		})
	}
	h, _ := newHandler(t, ktestingLogger(t))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, Path, nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", rec.Code)
	}
}

// TestFaultAllowsUnchanged: a fault of the webhook's own (here a panic)
// never refuses a pod: it is answered allowed, without a patch.
func TestFaultAllowsUnchanged(t *testing.T) {
	h, _ := newHandler(t, ktestingLogger(t))
	h.mutate = func(*admissionv1.AdmissionRequest, string) ([]byte, string, error) { panic("a bug") }
	rec := post(h, review(t, admissionv1.Create, podsResource, "", util.MakePod("p").GPUMem(4).Obj()))
	var out admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &out); rec.Code != http.StatusOK || err != nil {
		t.Fatalf("status %d (%v): %s", rec.Code, err, rec.Body)
	}
	if out.Response == nil || !out.Response.Allowed || out.Response.UID != "req-1" || out.Response.Patch != nil {
		t.Errorf("response %+v, want allowed for req-1 without a patch", out.Response)
	}
	if got := testutil.ToFloat64(h.admissions.WithLabelValues(ResultError)); got != 1 {
		t.Errorf("errors counted %v, want 1", got)
	}
}

func TestNewRefusesABadSchedulerName(t *testing.T) {
	if _, err := New(klog.Background(), "Not_A_Name", prometheus.NewRegistry()); err == nil {
		t.Error("New with an invalid scheduler name: no error")
	}
}

func ktestingLogger(t *testing.T) klog.Logger {
	logger, _ := ktesting.NewTestContext(t)
	return logger
}
