package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Path is where the webhook is served: the MutatingWebhookConfiguration's
// clientConfig path.
const Path = "/mutate-pods"

// DefaultSchedulerName is the profile name of the second scheduler the
// webhook sends GPU pods to.
const DefaultSchedulerName = "gpushare-scheduler"

// MaxBodyBytes caps an AdmissionReview. The API server takes request
// bodies of up to 3 MB, and a pod's JSON in the review may be larger than
// the protobuf it came in.
const MaxBodyBytes = 8 << 20

// Results of a review: the values of the label result of
// gpushare_webhook_admissions_total.
const (
	// ResultMutated: the answer sets spec.schedulerName.
	ResultMutated = "mutated"
	// ResultSkipped: allowed unchanged. It is not a pod CREATE, asks no
	// gpu-mem, or has chosen a scheduler already.
	ResultSkipped = "skipped"
	// ResultInvalid: not an AdmissionReview; answered HTTP 400.
	ResultInvalid = "invalid"
	// ResultError: the webhook failed on its own; allowed unchanged.
	ResultError = "error"
	// ResultConverted: a pod bound for DRA nodes, whose aliyun.com/gpu-mem
	// was turned into a claim from a ResourceClaimTemplate (EnableDRA).
	ResultConverted = "converted"
	// ResultDenied: a pod bound for DRA nodes was refused, with the reason
	// (EnableDRA). The conversion cannot keep its shape, or its template could
	// not be made.
	ResultDenied = "denied"
)

// results are every value of the label result.
var results = []string{ResultMutated, ResultSkipped, ResultInvalid, ResultError, ResultConverted, ResultDenied}

// Handler serves the webhook.
type Handler struct {
	schedulerName string
	logger        klog.Logger
	// admissions: result -> reviews answered.
	admissions *prometheus.CounterVec
	// mutate is Mutate; tests replace it.
	mutate func(req *admissionv1.AdmissionRequest, schedulerName string) (patch []byte, why string, err error)
	// dra, when set, converts pods bound for DRA nodes.
	dra *DRA
}

// DRA configures the conversion of pods bound for nodes served by the
// gpushare DRA driver (package draclaim). A pod CREATE is converted when the
// pod asks aliyun.com/gpu-mem and can only run on nodes carrying every
// label of NodeSelector (boundForDRA). The answer is the patch that makes
// it ask the same memory through a claim, once its ResourceClaimTemplate
// exists. Its scheduler is left as it is, as kube-scheduler allocates
// claims in every profile, unless NodeChoice sends it to the extender's. A
// pod the conversion cannot keep is refused with the reason. So is one
// whose GPU memory a ResourceQuota of its namespace limits but would not
// count once converted (checkQuotas). A pod that may land on DRA nodes and
// on others is not converted: some affinity terms ask a label and some do
// not, or it asks only some of the labels.
type DRA struct {
	// NodeSelector holds the labels of the DRA nodes (the chart's
	// draDriver.nodeSelector). The driver runs on nodes with all of them, the
	// device plugin on every other.
	NodeSelector map[string]string
	// Unit is aliyun.com/gpu-mem's unit on those nodes: GiB or MiB.
	Unit string
	// NodeChoice also gives converted pods the marker resource
	// gpushare.io/dra-claim, so that kube-scheduler asks the extender to rate
	// their nodes (draclaim.Convert). It also gives them the webhook's
	// scheduler name when their schedulerName is empty or default-scheduler,
	// as for pods asking gpu-mem. That scheduler's configuration lists the
	// marker as the extender's (config/kube-scheduler-config.yaml).
	NodeChoice bool
	// Templates makes the templates.
	Templates Templates
	// Quotas reads the namespaces' ResourceQuotas. A pod whose GPU memory a
	// quota of its namespace limits, and would not count once converted, is
	// refused (checkQuotas).
	Quotas Quotas
}

// selector is NodeSelector as KEY=VALUE pairs, sorted, comma-separated.
func (d DRA) selector() string {
	pairs := make([]string, 0, len(d.NodeSelector))
	for k, v := range d.NodeSelector {
		pairs = append(pairs, k+"="+v)
	}
	slices.Sort(pairs)
	return strings.Join(pairs, ",")
}

// Templates makes sure ResourceClaimTemplates exist.
type Templates interface {
	// Ensure makes sure tmpl exists in namespace with tmpl's spec. With
	// dryRun it writes nothing: an admission of a dry-run request has no side
	// effects.
	Ensure(ctx context.Context, namespace string, tmpl *resourcev1.ResourceClaimTemplate, dryRun bool) error
}

// EnableDRA turns on the conversion of pods bound for DRA nodes.
func (h *Handler) EnableDRA(d DRA) error {
	if err := d.Validate(); err != nil {
		return err
	}
	h.dra = &d
	return nil
}

// Validate reports what is wrong with d's settings.
func (d DRA) Validate() error {
	if len(d.NodeSelector) == 0 {
		return errors.New("DRA node selector: no label")
	}
	for k, v := range d.NodeSelector {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("DRA node selector key %q: %v", k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("DRA node selector value %q of %s: %v", v, k, errs)
		}
	}
	if err := draclaim.ValidUnit(d.Unit); err != nil {
		return err
	}
	if d.Templates == nil {
		return errors.New("DRA conversion without a template store")
	}
	if d.Quotas == nil {
		return errors.New("DRA conversion without a ResourceQuota lister")
	}
	return nil
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
			Help: "AdmissionReviews answered by the webhook, by result: mutated (scheduler name set), skipped, invalid (HTTP 400), error (allowed unchanged after a fault of the webhook's own), converted (gpu-mem turned into a DRA claim) or denied (a pod bound for DRA nodes refused, with the reason).",
		}, []string{"result"})}
	for _, r := range results {
		h.admissions.WithLabelValues(r)
	}
	if err := reg.Register(h.admissions); err != nil {
		return nil, fmt.Errorf("registering the webhook's metrics: %w", err)
	}
	return h, nil
}

// ValidSchedulerName checks name as the API server checks a pod's
// spec.schedulerName: a DNS subdomain.
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
	resp, result := h.respond(r.Context(), review.Request)
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
func (h *Handler) respond(ctx context.Context, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse, result string) {
	logger := h.logger.WithValues("uid", req.UID, "pod", klog.KRef(req.Namespace, req.Name), "operation", req.Operation)
	defer func() {
		if r := recover(); r != nil {
			logger.Error(fmt.Errorf("panic: %v", r), "Webhook failed; allowing the pod unchanged", "stack", string(debug.Stack()))
			resp, result = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}, ResultError
		}
	}()
	resp = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	if h.dra != nil {
		if resp, result, ok := h.convert(ctx, logger, req); ok {
			return resp, result
		}
	}
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

// Mutate returns the JSON patch for req, or nil and why none. Only one
// request gets a patch, setting spec.schedulerName to schedulerName: the
// CREATE of a pod that asks aliyun.com/gpu-mem in a container or an init
// container, and names no scheduler or the default one. err is set when
// the request's pod does not decode.
func Mutate(req *admissionv1.AdmissionRequest, schedulerName string) (patch []byte, why string, err error) {
	if why := notPodCreate(req); why != "" {
		return nil, why, nil
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

// notPodCreate says why req is not the CREATE of a pod, "" when it is.
// Those are the only requests the webhook changes.
func notPodCreate(req *admissionv1.AdmissionRequest) string {
	switch {
	case req.Operation != admissionv1.Create:
		return "not a CREATE"
	case req.Resource.Group != "" || req.Resource.Resource != "pods" || req.SubResource != "":
		return fmt.Sprintf("not a pod but %s", req.Resource.String())
	}
	return ""
}

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value string `json:"value"`
}

// convert answers req when it creates a pod bound for DRA nodes that asks
// aliyun.com/gpu-mem. ok is false for any other request, left to Mutate.
func (h *Handler) convert(ctx context.Context, logger klog.Logger, req *admissionv1.AdmissionRequest) (resp *admissionv1.AdmissionResponse, result string, ok bool) {
	if notPodCreate(req) != "" {
		return nil, "", false
	}
	var pod corev1.Pod
	if err := json.Unmarshal(req.Object.Raw, &pod); err != nil {
		return nil, "", false // Mutate reports it
	}
	if !boundForDRA(&pod, h.dra.NodeSelector) {
		return nil, "", false
	}
	deny := func(err error) (*admissionv1.AdmissionResponse, string, bool) {
		logger.V(2).Info("Refusing a pod bound for DRA nodes", "err", err)
		return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: false, Result: &metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
			Message: fmt.Sprintf("gpushare: a pod that selects nodes %s (spec.nodeSelector or required node affinity) runs on a DRA node: %v", h.dra.selector(), err),
		}}, ResultDenied, true
	}
	conv, err := draclaim.Convert(&pod, h.dra.Unit, h.dra.NodeChoice)
	switch {
	case errors.Is(err, gpushare.ErrNoGPUMem):
		return nil, "", false
	case err != nil:
		return deny(err)
	}
	if h.dra.NodeChoice && (pod.Spec.SchedulerName == "" || pod.Spec.SchedulerName == corev1.DefaultSchedulerName) {
		// Only the scheduler whose configuration names the extender knows
		// the marker resource. Send the pod there, as Mutate does for pods
		// asking gpu-mem.
		conv.Patch = append(conv.Patch, draclaim.PatchOp{Op: "add", Path: "/spec/schedulerName", Value: h.schedulerName})
	}
	if err := h.dra.checkQuotas(ctx, req.Namespace, conv.Units); err != nil {
		return deny(err)
	}
	dryRun := req.DryRun != nil && *req.DryRun
	if err := h.dra.Templates.Ensure(ctx, req.Namespace, conv.Template, dryRun); err != nil {
		return deny(fmt.Errorf("its ResourceClaimTemplate: %w", err))
	}
	patch, err := json.Marshal(conv.Patch)
	if err != nil {
		return deny(fmt.Errorf("encoding the patch: %w", err))
	}
	jsonPatch := admissionv1.PatchTypeJSONPatch
	logger.V(4).Info("Converting the pod's GPU memory to a DRA claim", "template", klog.KRef(req.Namespace, conv.Template.Name), "bytes", conv.Bytes)
	return &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true, Patch: patch, PatchType: &jsonPatch}, ResultConverted, true
}

// boundForDRA reports whether pod can only run on nodes carrying every
// label of labels. For each label, either its spec.nodeSelector holds it,
// or it has required node affinity every term of which asks it, with
// operator In and no other value. The terms are alternatives.
func boundForDRA(pod *corev1.Pod, labels map[string]string) bool {
	if len(labels) == 0 {
		return false
	}
	for k, v := range labels {
		if !selects(pod, k, v) {
			return false
		}
	}
	return true
}

// selects reports whether pod can only run on nodes labelled key=value.
func selects(pod *corev1.Pod, key, value string) bool {
	if v, set := pod.Spec.NodeSelector[key]; set && v == value {
		return true
	}
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return false
	}
	for _, term := range terms {
		if !slices.ContainsFunc(term.MatchExpressions, func(r corev1.NodeSelectorRequirement) bool {
			return r.Key == key && r.Operator == corev1.NodeSelectorOpIn && len(r.Values) > 0 &&
				!slices.ContainsFunc(r.Values, func(v string) bool { return v != value })
		}) {
			return false
		}
	}
	return true
}
