package webhook

import (
	"encoding/json"
	"net/http"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/test/util"
)

// FuzzAdmissionReview: any body gets HTTP 200 or 400, never another status
// or a panic; a 200 is an AdmissionReview answering the request's UID,
// always allowed, whose patch, if any, is the one that sets the scheduler,
// and only for the CREATE of a pod.
func FuzzAdmissionReview(f *testing.F) {
	f.Add(review(f, admissionv1.Create, podsResource, "", util.MakePod("p").GPUMem(4).Obj()))
	f.Add(review(f, admissionv1.Create, podsResource, "", util.MakePod("p").InitGPUMem(4).Container("c").Obj()))
	f.Add(review(f, admissionv1.Create, podsResource, "", util.MakePod("p").Container("c").Obj()))
	f.Add(review(f, admissionv1.Update, podsResource, "", util.MakePod("p").GPUMem(4).Obj()))
	f.Add(review(f, admissionv1.Create, podsResource, "", map[string]any{"spec": 1}))
	f.Add(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u"}}`)
	f.Add(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}`)
	f.Add(`{`)
	f.Add(``)
	h, _ := newHandler(f, klog.Background().V(1))
	want := `[{"op":"add","path":"/spec/schedulerName","value":"` + DefaultSchedulerName + `"}]`
	f.Fuzz(func(t *testing.T, body string) {
		rec := post(h, body)
		switch rec.Code {
		case http.StatusBadRequest:
			return
		case http.StatusOK:
		default:
			t.Fatalf("status %d for %q", rec.Code, body)
		}
		var in, out admissionv1.AdmissionReview
		if err := json.Unmarshal([]byte(body), &in); err != nil || in.Request == nil {
			t.Fatalf("answered 200 to a body that is no review (%v): %q", err, body)
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
			t.Fatalf("reply is not an AdmissionReview with a response (%v): %s", err, rec.Body)
		}
		if out.Response.UID != in.Request.UID || !out.Response.Allowed {
			t.Fatalf("response UID %q allowed %v for request UID %q", out.Response.UID, out.Response.Allowed, in.Request.UID)
		}
		if p := string(out.Response.Patch); p != "" && (p != want || in.Request.Operation != admissionv1.Create || in.Request.Resource.Resource != "pods") {
			t.Fatalf("patch %s for a %s of %s", p, in.Request.Operation, in.Request.Resource.String())
		}
	})
}
