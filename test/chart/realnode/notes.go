package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// RunUninstallNotes carries out the kubectl commands NOTES.txt lists under
// "Uninstall", with the API client instead of kubectl: `kubectl annotate
// node (-l SELECTOR | --all) KEY-`. Any other kubectl command there is an
// error, so NOTES.txt and this stay in step.
func (c *Cluster) RunUninstallNotes(ctx context.Context, notes string) error {
	_, after, ok := strings.Cut(notes, "\nUninstall")
	if !ok {
		return fmt.Errorf("NOTES.txt has no Uninstall section:\n%s", notes)
	}
	ran := 0
	for _, line := range strings.Split(after, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "kubectl" {
			continue
		}
		if err := c.runNotesCommand(ctx, f[1:]); err != nil {
			return fmt.Errorf("NOTES.txt's %q: %w", strings.TrimSpace(line), err)
		}
		ran++
	}
	if ran == 0 {
		return fmt.Errorf("NOTES.txt's Uninstall section lists no kubectl command:\n%s", after)
	}
	return nil
}

// runNotesCommand runs one kubectl command of NOTES.txt (args after
// "kubectl").
func (c *Cluster) runNotesCommand(ctx context.Context, args []string) error {
	if len(args) < 4 || args[0] != "annotate" || args[1] != "node" || !strings.HasSuffix(args[len(args)-1], "-") {
		return errors.New("not a command this test knows how to run")
	}
	key := strings.TrimSuffix(args[len(args)-1], "-")
	sel := metav1.ListOptions{}
	switch {
	case len(args) == 5 && args[2] == "-l":
		sel.LabelSelector = args[3]
	case len(args) == 4 && args[2] == "--all":
	default:
		return errors.New("want annotate node (-l SELECTOR | --all) KEY-")
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, sel)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: nil}}})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}
