// Package integration tests the DRA driver against a real Kubernetes 1.37
// control plane (test/integration/framework, KubernetesVersion):
// kube-scheduler allocates claims on the slices the drivers publish,
// kube-controller-manager makes claims from templates, and the tests play
// kubelet on each driver's socket. make test runs them.
package integration
