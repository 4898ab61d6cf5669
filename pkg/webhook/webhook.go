package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Path is where the webhook is served (the MutatingWebhookConfiguration's
// clientConfig path).
const Path = "/mutate-pods"

// DefaultSchedulerName is the profile name of the second scheduler the
// webhook sends GPU pods to.
const DefaultSchedulerName = "gpushare-scheduler"

// MaxBodyBytes caps an AdmissionReview: the API server takes request bodies
// of up to 3 MB, and a pod's JSON in the review may be larger than the
// protobuf it came in.
const MaxBodyBytes = 8 << 20

// Results of a review, the values of gpushare_webhook_admissions_total's
// label result.
const (
	// ResultMutated: the answer sets spec.schedulerName.
	ResultMutated = "mutated"
	// ResultSkipped: allowed unchanged (not a pod CREATE, no gpu-mem, or
	// a scheduler chosen already).
	ResultSkipped = "skipped"
	// ResultInvalid: not an AdmissionReview; answered HTTP 400.
	ResultInvalid = "invalid"
	// ResultError: the webhook failed on its own; allowed unchanged.
	ResultError = "error"
)

// Handler serves the webhook.
type Handler struct {
	schedulerName string
	logger        klog.Logger
	// admissions: result -> reviews answered.
	admissions *prometheus.CounterVec
	// mutate is Mutate; tests replace it.
	mutate func(req *admissionv1.AdmissionRequest, schedulerName string) (patch []byte, why string, err error)
}

// New returns the handler setting spec.schedulerName to schedulerName,
// registering its metrics with reg.
func New(logger klog.Logger, schedulerName string, reg prometheus.Registerer) (*Handler, error) {
	if err := ValidSchedulerName(schedulerName); err != nil {
		return nil, err
	}
	h := &Handler{schedulerName: schedulerName, logger: logger, mutate: Mutate,
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpushare", Subsystem: "webhook", Name: "admissions_total",
			Help: "AdmissionReviews answered by the scheduler-name webhook, by result: mutated, skipped, invalid (HTTP 400) or error (allowed unchanged after a fault of the webhook's own).",
		}, []string{"result"})}
	for _, r := range []string{ResultMutated, ResultSkipped, ResultInvalid, ResultError} {
		h.admissions.WithLabelValues(r)
	}
	if err := reg.Register(h.admissions); err != nil {
		return nil, fmt.Errorf("registering the webhook's metrics: %w", err)
	}
	return h, nil
}

// ValidSchedulerName checks name as the API server checks a pod's
// spec.schedulerName (a DNS subdomain).
func ValidSchedulerName(name string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("scheduler name %q: %v", name, errs)
	}
	return nil
}

// ServeHTTP answers a POSTed AdmissionReview.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		h.invalid(w, fmt.Errorf("reading the AdmissionReview: %w", err))
		return
	}
	review, err := DecodeReview(body)
	if err != nil {
		h.invalid(w, err)
		return
	}
	resp, result := h.respond(review.Request)
	h.admissions.WithLabelValues(result).Inc()
	out, err := json.Marshal(&admissionv1.AdmissionReview{TypeMeta: review.TypeMeta, Response: resp})
	if err != nil {
		// Cannot happen for these types; say so rather than send nothing.
		h.logger.Error(err, "Encoding the AdmissionReview response")
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

func (h *Handler) invalid(w http.ResponseWriter, err error) {
	h.admissions.WithLabelValues(ResultInvalid).Inc()
	h.logger.V(2).Info("Refusing a request that is not an AdmissionReview", "err", err)
	http.Error(w, err.Error(), http.StatusBadRequest)
}

// DecodeReview parses an admission.k8s.io/v1 AdmissionReview that carries a
// request with a UID.
func DecodeReview(body []byte) (*admissionv1.AdmissionReview, error) {
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &review); err != nil {
		return nil, fmt.Errorf("decoding the AdmissionReview: %w", err)
	}
	if gv := admissionv1.SchemeGroupVersion.String(); review.APIVersion != gv || review.Kind != "AdmissionReview" {
		return nil, fmt.Errorf("got apiVersion %q kind %q; want %s AdmissionReview", review.APIVersion, review.Kind, gv)
	}
	if review.Request == nil || review.Request.UID == "" {
		return nil, errors.New("the AdmissionReview has no request or no request UID")
	}
	return &review, nil
}

// respond decides the answer to req: always allowed, with a patch when the
// pod is to go to the gpushare scheduler. A fault of the handler's own is
// logged and answered allowed without a patch.
func (h *Handler) respond(req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse, result string) {
	logger := h.logger.WithValues("uid", req.UID, "pod", klog.KRef(req.Namespace, req.Name), "operation", req.Operation)
	defer func() {
		if r := recover(); r != nil {
			logger.Error(fmt.Errorf("panic: %v", r), "Webhook failed; allowing the pod unchanged", "stack", string(debug.Stack()))
			resp, result = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, ResultError
		}
	}()
	resp = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	patch, why, err := h.mutate(req, h.schedulerName)
	switch {
	case err != nil:
		logger.Error(err, "Webhook failed; allowing the pod unchanged")
		return resp, ResultError
	case patch == nil:
		logger.V(5).Info("Pod left unchanged", "why", why)
		return resp, ResultSkipped
	}
	jsonPatch := admissionv1.PatchTypeJSONPatch
	resp.Patch, resp.PatchType = patch, &jsonPatch
	logger.V(4).Info("Setting the pod's scheduler", "schedulerName", h.schedulerName)
	return resp, ResultMutated
}

// Mutate returns the JSON patch for req, or nil and why none: only the
// CREATE of a pod that asks aliyun.com/gpu-mem in a container or an init
// container and names no scheduler or the default one gets
// spec.schedulerName set to schedulerName. err is set when the request's
// pod does not decode.
func Mutate(req *admissionv1.AdmissionRequest, schedulerName string) (patch []byte, why string, err error) {
	switch {
	case req.Operation != admissionv1.Create:
		return nil, "not a CREATE", nil
	case req.Resource.Group != "" || req.Resource.Resource != "pods" || req.SubResource != "":
		return nil, fmt.Sprintf("not a pod but %s", req.Resource.String()), nil
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return nil, "", fmt.Errorf("decoding the pod of the AdmissionReview: %w", err)
	}
	if _, err := gpushare.PodDemand(&pod); errors.Is(err, gpushare.ErrNoGPUMem) {
		return nil, "asks no " + string(gpushare.ResourceGPUMem), nil
	}
	if s := pod.Spec.SchedulerName; s != "" && s != corev1.DefaultSchedulerName {
		return nil, fmt.Sprintf("names scheduler %q", s), nil
	}
	// "add" sets a member whether or not it exists.
	patch, err = json.Marshal([]jsonPatchOp{{Op: "add", Path: "/spec/schedulerName", Value: schedulerName}})
	if err != nil {
		return nil, "", fmt.Errorf("encoding the patch: %w", err)
	}
	return patch, "", nil
}

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value string `json:"value"`
}
