package realnode

import (
	"context"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/test/chart"
)

// TestUninstallNotesRun: for every combination of values the chart tests,
// each kubectl command NOTES.txt lists under Uninstall is one that
// RunUninstallNotes knows how to run (here against a fake clientset), so
// a command added to NOTES.txt cannot make the real-node tests' uninstall
// fail. It needs no real node.
func TestUninstallNotesRun(t *testing.T) {
	c, err := chart.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, combo := range chart.Combos() {
		t.Run(combo.Name, func(t *testing.T) {
			r, err := chart.Render(c, combo.Values, nil)
			if err != nil {
				t.Fatal(err)
			}
			cl := &Cluster{Client: fake.NewClientset()}
			if err := cl.RunUninstallNotes(context.Background(), r.Notes); err != nil {
				t.Error(err)
			}
		})
	}
}
