package chart

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// object is a cluster-scoped object of apiVersion and kind named name.
func object(apiVersion, kind, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name},
	}}
}

// TestNotesWarnOfAMissingRuntimeClass: installed into a cluster without
// the RuntimeClass the device plugin names, NOTES.txt says so before any
// pod fails, with both fixes; without a cluster (helm template), with the
// RuntimeClass, or without one asked for, it says nothing.
func TestNotesWarnOfAMissingRuntimeClass(t *testing.T) {
	c := load(t)
	ns := object("v1", "Namespace", Release.Namespace)
	const warning = `WARNING: this cluster has no RuntimeClass "nvidia"`
	tests := []struct {
		name    string
		values  map[string]any
		cluster []runtime.Object // nil: no cluster
		warn    bool
	}{
		{name: "no cluster"},
		{name: "a cluster without it", cluster: []runtime.Object{ns}, warn: true},
		{name: "a cluster with it", cluster: []runtime.Object{ns, object("node.k8s.io/v1", "RuntimeClass", "nvidia")}},
		{name: "a cluster with another one", cluster: []runtime.Object{ns, object("node.k8s.io/v1", "RuntimeClass", "nvidia-cdi")}, warn: true},
		{name: "none asked for", cluster: []runtime.Object{ns}, values: map[string]any{"devicePlugin": map[string]any{"runtimeClassName": ""}}},
		{name: "no device plugin", cluster: []runtime.Object{ns}, values: map[string]any{"devicePlugin": map[string]any{"enabled": false}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Rendering
			var err error
			if tt.cluster == nil {
				r, err = Render(c, tt.values, nil)
			} else {
				r, err = RenderIn(c, tt.values, tt.cluster...)
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(r.Notes, warning); got != tt.warn {
				t.Errorf("NOTES.txt warns: %v, want %v:\n%s", got, tt.warn, r.Notes)

			}
			if tt.warn {
				for _, fix := range []string{`--set devicePlugin.runtimeClassName=""`, `kind: RuntimeClass\nmetadata:\n  name: nvidia\nhandler: nvidia\n' | kubectl apply -f -`} {
					if !strings.Contains(r.Notes, fix) {
						t.Errorf("the warning does not say %q:\n%s", fix, r.Notes)
					}
				}
			}
		})
	}
}

// TestNotesNameTheLeftovers: NOTES.txt names what uninstall leaves behind
// for the features the values turn on, each with the command that removes
// it (docs/uninstall.md lists the same).
func TestNotesNameTheLeftovers(t *testing.T) {
	c := load(t)
	const (
		cdiSpec    = "rm -f /var/run/cdi/gpushare.io-gpu-mem.yaml"
		claimSpecs = "/var/run/cdi/gpushare.io-gpu-claim_*.yaml"
		mpsRoot    = "rm -rf /run/gpushare/mps"
		checkpoint = "rm -rf /var/lib/kubelet/plugins/gpu.gpushare.io"
		computeMod = "nvidia-smi -c DEFAULT"
		templates  = "kubectl delete resourceclaimtemplates -A -l app.kubernetes.io/managed-by=gpushare-webhook"
		cordoned   = "gpushare.io/cordoned-gpus-"
	)
	all := []string{cdiSpec, claimSpecs, mpsRoot, checkpoint, computeMod, templates, cordoned}
	tests := []struct {
		name   string
		values map[string]any
		want   []string
	}{
		{name: "defaults (isolation auto)", want: []string{cdiSpec, mpsRoot, cordoned}},
		{name: "isolation none", values: map[string]any{"devicePlugin": map[string]any{"isolation": "none"}}, want: []string{cdiSpec, cordoned}},
		{name: "mps setting compute modes", values: map[string]any{"devicePlugin": map[string]any{"mpsSetComputeMode": true}}, want: []string{cdiSpec, mpsRoot, computeMod, cordoned}},
		{name: "the DRA driver", values: map[string]any{"topology": "extender", "draDriver": map[string]any{"enabled": true}}, want: []string{cdiSpec, claimSpecs, mpsRoot, checkpoint, templates, cordoned}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Render(c, tt.values, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range all {
				if strings.Contains(r.Notes, s) {
					got = append(got, s)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("leftovers NOTES.txt names (-want +got):\n%s\n%s", diff, r.Notes)
			}
		})
	}
}
