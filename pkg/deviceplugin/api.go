package deviceplugin

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/gpushare/gpushare/pkg/kubeclient"
)

// PodAPI is the pod write the plugin makes (its reads: the informer and
// NodePodLister).
type PodAPI interface {
	// PatchPodAnnotations sets (non-nil) or removes (nil) annotations of
	// the pod namespace/name whose UID is uid. It fails, and changes
	// nothing, when that name now belongs to another pod.
	PatchPodAnnotations(ctx context.Context, namespace, name string, uid types.UID, set map[string]*string) error
}

// NodeAPI is the part of the node API the plugin uses.
type NodeAPI interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// PatchNodeMetadata sets (non-nil) or removes (nil) labels and
	// annotations of the node, in one patch.
	PatchNodeMetadata(ctx context.Context, name string, labels, annotations map[string]*string) error
	// PatchNodeCapacity sets status capacity and allocatable of resources;
	// a nil value removes the resource.
	PatchNodeCapacity(ctx context.Context, name string, values map[corev1.ResourceName]*string) error
}

// ClientAPI implements PodAPI and NodeAPI with a clientset.
type ClientAPI struct {
	Client kubernetes.Interface
}

var (
	_ PodAPI        = ClientAPI{}
	_ NodePodLister = ClientAPI{}
	_ NodeAPI       = ClientAPI{}
	_ NodeTaintAPI  = ClientAPI{}
)

// ListNodePods lists the pods of every namespace whose spec.nodeName is
// node. Without a resourceVersion the list is consistent: the API server
// answers as of now, not from whatever its cache holds.
func (a ClientAPI) ListNodePods(ctx context.Context, node string) ([]corev1.Pod, error) {
	l, err := a.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String(),
	})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// PatchPodAnnotations sends a merge patch that also sets metadata.uid:
// kube-apiserver refuses to change a pod's UID, so a patch meant for a pod
// that was deleted cannot land on a successor of the same name.
func (a ClientAPI) PatchPodAnnotations(ctx context.Context, namespace, name string, uid types.UID, set map[string]*string) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": uid, "annotations": set}})
	if err != nil {
		return err
	}
	_, err = a.Client.CoreV1().Pods(namespace).Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{})
	return err
}

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

// NewClient builds the device plugin's API client from a kubeconfig path ("" for in-cluster).
func NewClient(kubeconfig string, qps float32, burst int) (kubernetes.Interface, error) {
	return kubeclient.New(kubeconfig, qps, burst, "gpushare-device-plugin")
}

// eventRecorder adapts a client-go recorder to Recorder.
type eventRecorder struct{ r record.EventRecorder }

func (e eventRecorder) Eventf(pod *corev1.Pod, eventtype, reason, messageFmt string, args ...any) {
	e.r.Eventf(pod, eventtype, reason, messageFmt, args...)
}
