// Package webhook is a mutating admission webhook that sends pods asking
// aliyun.com/gpu-mem to the gpushare scheduler.
//
// It serves the topology where a second kube-scheduler (profile
// schedulerName gpushare-scheduler, the extender beside it) places GPU
// pods, and the default scheduler everything else. On CREATE of a pod that
// asks gpu-mem, and whose spec.schedulerName is empty or
// "default-scheduler", it answers with a JSON patch. The patch sets
// spec.schedulerName to the configured name.
//
// With EnableDRA it also converts pods bound for nodes of the gpushare DRA
// driver: those whose spec.nodeSelector, or every term of whose required
// node affinity, asks the DRA nodes' label. Their aliyun.com/gpu-mem
// becomes a claim from a ResourceClaimTemplate of the same memory (package
// draclaim). The webhook creates the template in the pod's namespace when
// it is missing, except for a dry run. It refuses such a pod, with the
// reason, in three cases. The conversion cannot keep its shape (gpu-mem in
// two containers, or on several cards). Its template cannot be made. Or a
// ResourceQuota of its namespace limits its GPU memory but would not count
// it once converted.
//
// It never refuses any other pod: every well-formed AdmissionReview is
// answered allowed, with the patch or without. A fault of its own (an
// object that does not decode as a Pod, a panic) is logged and answered
// allowed without a patch. Only a body that is not an admission.k8s.io/v1
// AdmissionReview with a request gets HTTP 400. The API server handles
// that by the webhook's failurePolicy.
package webhook
