// Package webhook is a mutating admission webhook that sends pods asking
// aliyun.com/gpu-mem to the gpushare scheduler: on CREATE of such a pod
// whose spec.schedulerName is empty or "default-scheduler" it answers with a
// JSON patch setting spec.schedulerName to the configured name, for the
// topology where a second kube-scheduler (profile schedulerName
// gpushare-scheduler, the extender beside it) places GPU pods and the
// default scheduler everything else.
//
// With EnableDRA it also converts pods bound for nodes of the gpushare DRA
// driver (those whose spec.nodeSelector, or every term of whose required
// node affinity, asks the DRA nodes' label): their
// aliyun.com/gpu-mem becomes a claim from a ResourceClaimTemplate of the
// same memory (package draclaim), which the webhook creates in the pod's
// namespace when missing (not for a dry run). Such a pod that the
// conversion cannot keep (gpu-mem in two containers, on several cards),
// whose template cannot be made, or whose GPU memory a ResourceQuota of
// its namespace limits but would not count once converted is refused,
// with the reason.
//
// It never refuses any other pod: every well-formed AdmissionReview is
// answered allowed, with the patch or without. A fault of its own (an object that
// does not decode as a Pod, a panic) is logged and answered allowed without
// a patch. Only a body that is not an admission.k8s.io/v1 AdmissionReview
// with a request gets HTTP 400, which the API server handles by the
// webhook's failurePolicy.
package webhook
