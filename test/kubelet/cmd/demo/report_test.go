package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
)

// TestKubectlSkew: the demo's kubectl hint is kube-apiserver's minor
// version and one either side, or the rule itself when the server's
// version cannot be read as 1.MINOR.
func TestKubectlSkew(t *testing.T) {
	for _, tc := range []struct{ server, want string }{
		{"v1.37.2", "kubectl v1.36 to v1.38 (kube-apiserver v1.37.2)"},
		{"v1.34.3", "kubectl v1.33 to v1.35 (kube-apiserver v1.34.3)"},
		{"v0.0.0-master+$Format:%H$", "kubectl within one minor version of kube-apiserver"},
	} {
		client := fake.NewClientset()
		client.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: tc.server}
		if got := kubectlSkew(client); got != tc.want {
			t.Errorf("kube-apiserver %s: kubectlSkew = %q, want %q", tc.server, got, tc.want)
		}
	}
}
