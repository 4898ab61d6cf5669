// Package draclaim turns a pod that asks aliyun.com/gpu-mem into one that
// asks the same memory of one card through Dynamic Resource Allocation
// (resource.k8s.io/v1).
//
// It is the webhook's route for pods bound for nodes where the gpushare
// DRA driver, not the device plugin, serves the cards. KEP-5004 (extended
// resources backed by DRA) maps a quantity to a count of devices, never to
// capacity. So "aliyun.com/gpu-mem: 8" cannot become "8 GiB of one card"
// that way, and Convert does it explicitly. The pod's GPU container loses
// its aliyun.com/gpu-mem limit and request, and an aliyun.com/gpu-count of
// 1. It names a pod-level claim, gpushare-gpu-mem, made from the
// ResourceClaimTemplate gpushare-gpu-mem-<size>: one device of the
// DeviceClass gpu-mem.gpushare.io, with capacity.requests.memory: <size>.
// The webhook creates the template in the pod's namespace when it is
// missing. One template per size and namespace serves every pod of that
// size; kube-controller-manager makes each pod its own claim from it.
//
// Convert is pure: it reads the pod and returns the template and a JSON
// patch (RFC 6902) of the pod. It refuses, with a reason fit for a user,
// the shapes DRA's one-claim rewrite cannot keep. They are GPU memory in
// more than one container (each would see the whole claim), a container
// spread over several cards (aliyun.com/gpu-count > 1), and a pod that
// already has a claim of that name.
package draclaim
