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

	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/kubeclient"
)

// ClientAPI implements, with a clientset, the handoff's pod API
// (handoff.PodAPI, handoff.NodePodLister) and the plugin's own node read,
// NodeGetter. The node writes are nodeagent.ClientAPI's.
type ClientAPI struct {
	Client kubernetes.Interface
}

var (
	_ handoff.PodAPI        = ClientAPI{}
	_ handoff.NodePodLister = ClientAPI{}
	_ NodeGetter            = ClientAPI{}
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

// NewClient builds the device plugin's API client from a kubeconfig path ("" for in-cluster).
func NewClient(kubeconfig string, qps float32, burst int) (kubernetes.Interface, error) {
	return kubeclient.New(kubeconfig, qps, burst, "gpushare-device-plugin")
}

// eventRecorder adapts a client-go recorder to handoff.Recorder.
type eventRecorder struct{ r record.EventRecorder }

func (e eventRecorder) Eventf(pod *corev1.Pod, eventtype, reason, messageFmt string, args ...any) {
	e.r.Eventf(pod, eventtype, reason, messageFmt, args...)
}
