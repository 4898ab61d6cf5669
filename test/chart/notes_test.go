package chart

import (
	"strings"
	"testing"

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
