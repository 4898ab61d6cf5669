package util

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// KubeList renders objects as `kubectl get -o yaml` would: a List.
func KubeList(t testing.TB, objs ...any) string {
	t.Helper()
	list := map[string]any{"apiVersion": "v1", "kind": "List"}
	var items []any
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Node:
			o.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}
		case *corev1.Pod:
			o.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		}
		items = append(items, o)
	}
	list["items"] = items
	b, err := yaml.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
