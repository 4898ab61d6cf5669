package nodeagent

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// ClientAPI implements NodeAPI and NodeTaintAPI with a clientset.
type ClientAPI struct {
	Client kubernetes.Interface
}

var (
	_ NodeAPI      = ClientAPI{}
	_ NodeTaintAPI = ClientAPI{}
)

func (a ClientAPI) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return a.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// PatchNodeMetadata sends a merge patch of metadata.labels and
// metadata.annotations, each only when it changes something.
func (a ClientAPI) PatchNodeMetadata(ctx context.Context, name string, labels, annotations map[string]*string) error {
	meta := map[string]any{}
	if len(labels) > 0 {
		meta["labels"] = labels
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	_, err = a.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

// SetNodeTaints replaces the node's spec.taints with a JSON patch that
// first tests its resourceVersion, so a taint another writer added
// meanwhile is never lost.
func (a ClientAPI) SetNodeTaints(ctx context.Context, name, resourceVersion string, taints []corev1.Taint) error {
	if taints == nil {
		taints = []corev1.Taint{}
	}
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": resourceVersion},
		{"op": "add", "path": "/spec/taints", "value": taints},
	})
	if err != nil {
		return err
	}
	_, err = a.Client.CoreV1().Nodes().Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{})
	return err
}

func (a ClientAPI) PatchNodeCapacity(ctx context.Context, name string, values map[corev1.ResourceName]*string) error {
	body, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": values, "allocatable": values}})
	if err != nil {
		return err
	}
	_, err = a.Client.CoreV1().Nodes().PatchStatus(ctx, name, body)
	return err
}
