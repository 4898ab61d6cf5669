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
// node (-l SELECTOR | --all) KEY-`, the same with label, and `kubectl
// delete resourceclaimtemplates -A -l SELECTOR`. Any other kubectl command
// there is an error, so NOTES.txt and this stay in step. The host commands
// there (rm, nvidia-smi) are not run: teardown removes the node's host
// directories.
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
// "kubectl"): `annotate node (-l SELECTOR | --all) KEY- ...` or
// `label node (-l SELECTOR | --all) KEY- ...`, each key removed.
func (c *Cluster) runNotesCommand(ctx context.Context, args []string) error {
	if len(args) > 0 && args[0] == "delete" {
		return c.runNotesDelete(ctx, args)
	}
	if len(args) < 4 || (args[0] != "annotate" && args[0] != "label") || args[1] != "node" {
		return errors.New("not a command this test knows how to run")
	}
	sel := metav1.ListOptions{}
	var keys []string
	switch {
	case args[2] == "-l" && len(args) >= 5:
		sel.LabelSelector, keys = args[3], args[4:]
	case args[2] == "--all":
		keys = args[3:]
	default:
		return errors.New("want annotate|label node (-l SELECTOR | --all) and one or more KEY-")
	}
	remove := map[string]any{}
	for _, k := range keys {
		if !strings.HasSuffix(k, "-") {
			return fmt.Errorf("%q removes nothing: want KEY-", k)
		}
		remove[strings.TrimSuffix(k, "-")] = nil
	}
	field := "annotations"
	if args[0] == "label" {
		field = "labels"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{field: remove}})
	if err != nil {
		return err
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, sel)
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

// runNotesDelete runs `delete resourceclaimtemplates -A -l SELECTOR` (args
// after "kubectl"): every ResourceClaimTemplate the selector names, in
// every namespace.
func (c *Cluster) runNotesDelete(ctx context.Context, args []string) error {
	if len(args) != 5 || args[1] != "resourceclaimtemplates" || args[2] != "-A" || args[3] != "-l" {
		return errors.New("want delete resourceclaimtemplates -A -l SELECTOR")
	}
	templates, err := c.Client.ResourceV1().ResourceClaimTemplates(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: args[4]})
	if err != nil {
		return err
	}
	for _, t := range templates.Items {
		if err := c.Client.ResourceV1().ResourceClaimTemplates(t.Namespace).Delete(ctx, t.Name, metav1.DeleteOptions{}); err != nil {
			return err
		}
	}
	return nil
}
