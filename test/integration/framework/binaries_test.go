package framework

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBuildGroups: the control plane's, a node's and containerd's specs
// fall into one go build per tool module, ldflags and tags, in the order
// of each group's first spec.
func TestBuildGroups(t *testing.T) {
	names := func(groups [][]buildSpec) [][]string {
		var out [][]string
		for _, g := range groups {
			var ns []string
			for _, s := range g {
				ns = append(ns, s.name)
			}
			out = append(out, ns)
		}
		return out
	}
	cd := "-" + ContainerdVersion
	for _, tc := range []struct {
		name  string
		specs []buildSpec
		want  [][]string
	}{
		{name: "control plane with etcd", specs: []buildSpec{kubernetesSpec("kube-apiserver"), kubernetesSpec("kube-scheduler"), etcdSpec()},
			want: [][]string{{"kube-apiserver", "kube-scheduler"}, {"etcd"}}},
		{name: "node and containerd", specs: append(nodeSpecs(KubernetesVersion), containerdSpecs()...),
			want: [][]string{{"kubelet", "kube-proxy", "kube-controller-manager"}, {"containerd" + cd, "containerd-shim-runc-v2" + cd, "ctr" + cd}}},
		{name: "two versions apart", specs: []buildSpec{kubernetesVersionSpec("kubelet", KubernetesVersionOldest), kubernetesSpec("kubelet")},
			want: [][]string{{"kubelet"}, {"kubelet"}}},
		{name: "none", want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, names(buildGroups(tc.specs))); diff != "" {
				t.Errorf("buildGroups (-want +got):\n%s", diff)
			}
		})
	}
}

// TestExecName: the file go build -o DIR/ writes for a main package.
func TestExecName(t *testing.T) {
	for pkg, want := range map[string]string{
		"k8s.io/kubernetes/cmd/kube-apiserver":        "kube-apiserver",
		"go.etcd.io/etcd/server/v3":                   "server",
		"github.com/containerd/containerd/v2/cmd/ctr": "ctr",
		"example.com/tool/v0":                         "v0",
		"example.com/v2":                              "example.com",
		"example.com/cmd/vet":                         "vet",
	} {
		if got := execName(pkg); got != want {
			t.Errorf("execName(%q) = %q, want %q", pkg, got, want)
		}
	}
}
