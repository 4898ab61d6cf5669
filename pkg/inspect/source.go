package inspect

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// errNotFound is wrapped by the error for a node name that does not exist:
// `node "x" not found`.
var errNotFound = errors.New("not found")

// Query says which nodes to report.
type Query struct {
	// Node is one node's name; empty for all nodes.
	Node string
	// Selector is a node label selector ("gpu=t4"); empty for all. Only
	// the API source supports it.
	Selector string
}

// Source produces a report.
type Source interface {
	Report(ctx context.Context, q Query) (*Report, error)
}

// API is the slice of the Kubernetes API the plugin reads.
type API interface {
	// GetNode returns the named node; an apierrors NotFound error if none.
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	// ListNodes returns the nodes matching a label selector ("" for all).
	ListNodes(ctx context.Context, selector string) ([]corev1.Node, error)
	// ListPods returns the pods of every namespace.
	ListPods(ctx context.Context) ([]corev1.Pod, error)
}

// ClientAPI is API over a clientset.
type ClientAPI struct {
	Client kubernetes.Interface
}

var _ API = ClientAPI{}

// GetNode implements API.
func (a ClientAPI) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return a.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

// ListNodes implements API.
func (a ClientAPI) ListNodes(ctx context.Context, selector string) ([]corev1.Node, error) {
	l, err := a.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// podPageSize bounds each pod list response in a large cluster.
const podPageSize = 500

// ListPods implements API, a page of podPageSize pods at a time.
func (a ClientAPI) ListPods(ctx context.Context) ([]corev1.Pod, error) {
	var pods []corev1.Pod
	opts := metav1.ListOptions{Limit: podPageSize}
	for {
		l, err := a.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return nil, err
		}
		pods = append(pods, l.Items...)
		if l.Continue == "" {
			return pods, nil
		}
		opts.Continue = l.Continue
	}
}

// APISource computes the report from nodes and pods read from the API, with
// the extender's own cache, so both show the same numbers; it works while
// the extender is down.
type APISource struct {
	API API
}

var _ Source = APISource{}

// Report implements Source. Every pod is listed (all namespaces), since
// any of them may hold memory on the nodes shown.
func (s APISource) Report(ctx context.Context, q Query) (*Report, error) {
	logger := klog.FromContext(ctx)
	var nodes []corev1.Node
	if q.Node != "" {
		n, err := s.API.GetNode(ctx, q.Node)
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("node %q %w", q.Node, errNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("getting node %q: %w", q.Node, explainAPI(err))
		}
		nodes = []corev1.Node{*n}
	} else {
		var err error
		if nodes, err = s.API.ListNodes(ctx, q.Selector); err != nil {
			return nil, fmt.Errorf("listing nodes: %w", explainAPI(err))
		}
	}
	pods, err := s.API.ListPods(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing pods in all namespaces: %w", explainAPI(err))
	}
	logger.V(2).Info("Read the API", "nodes", len(nodes), "pods", len(pods))

	c, err := cache.New(cache.Config{})
	if err != nil {
		return nil, fmt.Errorf("creating cache: %w", err)
	}
	shown := make(map[string]bool, len(nodes))
	address := make(map[string]string, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		shown[n.Name] = true
		address[n.Name] = nodeAddress(n)
		if err := c.SetNode(n); err != nil {
			// Shown as the node's InventoryError.
			logger.V(4).Info("Node inventory ignored", "node", klog.KObj(n), "err", err)
		}
	}
	var pending []PendingPod
	for i := range pods {
		pod := &pods[i]
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		node := pod.Spec.NodeName
		if node == "" {
			if p, ok := pendingPod(pod); ok && q.Node == "" {
				pending = append(pending, p)
			}
			// A pending pod holds nothing; one carrying an allocation
			// annotation is shown as ignored on the node it names.
			node = allocatedNode(pod)
		}
		if shown[node] {
			// UpsertPod charges any node it names; only feed pods on
			// the nodes shown, so no others appear.
			c.UpsertPod(pod)
		}
	}
	views, _ := c.Inspect(q.Node)
	r := newReport("api", views, q.Node, address, pending)
	if d, ok := s.API.(DRAAPI); ok {
		// Nodes of the DRA driver (Kubernetes 1.36+): their cards and
		// claims are in resource.k8s.io, not in annotations.
		slices, claims := readDRA(ctx, d)
		mergeDRA(ctx, r, draNodes(slices, claims, address), shown)
	}
	return r, nil
}

// allocatedNode returns the node a pod's valid allocation annotation names,
// or "".
func allocatedNode(pod *corev1.Pod) string {
	s, ok := pod.Annotations[gpushare.AnnotationAllocation]
	if !ok {
		return ""
	}
	a, err := gpushare.ParseAllocation(s)
	if err != nil {
		return ""
	}
	return a.Node
}

// pendingPod describes an unscheduled pod asking gpu-mem; ok is false for a
// pod asking none.
func pendingPod(pod *corev1.Pod) (p PendingPod, ok bool) {
	demand, err := gpushare.PodDemand(pod)
	if errors.Is(err, gpushare.ErrNoGPUMem) {
		return PendingPod{}, false
	}
	p = PendingPod{Namespace: pod.Namespace, Name: pod.Name, Reason: "not yet scheduled"}
	if err != nil {
		p.Reason, p.Invalid = "invalid request, no node admits it: "+err.Error(), true
		return p, true
	}
	p.Units = demand.Total()
	cc, err := gpushare.ParseCardConstraints(pod.Annotations)
	if err != nil {
		p.Reason, p.Invalid = "invalid card annotation, no node admits it: "+err.Error(), true
		return p, true
	}
	p.Cards = cc.String()
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Message != "" {
			p.Reason = "not yet scheduled: " + c.Message
		}
	}
	return p, true
}

// nodeAddress returns the node's first InternalIP, else its first
// ExternalIP, else "".
func nodeAddress(n *corev1.Node) string {
	for _, t := range []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type == t {
				return a.Address
			}
		}
	}
	return ""
}

// explainAPI adds the fix to API errors a user can act on.
func explainAPI(err error) error {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Errorf("%w (the plugin needs get and list on nodes, and list on pods in all namespaces; ask for them or use --from-extender URL)", err)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w (log in again, or pick another --context)", err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) && !errors.Is(err, context.Canceled) {
		// Not an answer from the server: it could not be reached.
		return fmt.Errorf("%w (is the cluster reachable? check --kubeconfig and --context, or read the extender with --from-extender URL)", err)
	}
	return err
}
