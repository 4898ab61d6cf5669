package draclaim

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestTemplateLabel: the templates the webhook makes carry the label that
// docs/uninstall.md deletes them by
// (app.kubernetes.io/managed-by=gpushare-webhook), and the size in their name.
func TestTemplateLabel(t *testing.T) {
	tmpl := Template(resource.NewQuantity(8<<30, resource.BinarySI))
	got := []string{tmpl.Name, tmpl.Labels["app.kubernetes.io/managed-by"]}
	if diff := cmp.Diff([]string{"gpushare-gpu-mem-8gi", "gpushare-webhook"}, got); diff != "" {
		t.Errorf("the template's name and managed-by label (-want +got):\n%s", diff)
	}
}
