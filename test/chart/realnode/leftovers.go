package realnode

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/integration/framework"
)

// leftoverPrefix begins the name of every object the chart makes and of
// those its components make at run time (Leases).
const leftoverPrefix = "gpushare"

// leftoverKinds are the kinds the release or its components write: in the
// release namespace, then cluster-scoped. Events are left out: they expire
// on their own (an hour).
var leftoverKinds = []struct {
	gvr        schema.GroupVersionResource
	namespaced bool
}{
	{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, true},
	{schema.GroupVersionResource{Version: "v1", Resource: "services"}, true},
	{schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, true},
	{schema.GroupVersionResource{Version: "v1", Resource: "secrets"}, true},
	{schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}, true},
	{schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}, true},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "replicasets"}, true},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}, true},
	{schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "controllerrevisions"}, true},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"}, true},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"}, true},
	{schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}, true},
	{schema.GroupVersionResource{Group: "policy", Version: "v1", Resource: "poddisruptionbudgets"}, true},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"}, false},
	{schema.GroupVersionResource{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"}, false},
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"}, false},
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"}, false},
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}, false},
	{schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}, false},
}

// Leftovers lists what of the release is still in the cluster, one
// "resource namespace/name" a line, sorted: every object of leftoverKinds
// in the release namespace or cluster-scoped whose name starts with
// "gpushare" or that carries the release's instance label, and every
// gpushare annotation, label (ours or the GFD-form ones the plugin writes), taint or allocatable aliyun.com resource still on
// a node.
func (c *Cluster) Leftovers(ctx context.Context) ([]string, error) {
	dyn, err := dynamic.NewForConfig(c.CP.RESTConfig(framework.AdminUser))
	if err != nil {
		return nil, fmt.Errorf("building a dynamic client: %w", err)
	}
	var out []string
	for _, k := range leftoverKinds {
		ri := dyn.Resource(k.gvr)
		var items []metav1.Object
		if k.namespaced {
			l, err := ri.Namespace(Namespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, fmt.Errorf("listing %s in %s: %w", k.gvr.Resource, Namespace, err)
			}
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		} else {
			l, err := ri.List(ctx, metav1.ListOptions{})
			if err != nil {
				return nil, fmt.Errorf("listing %s: %w", k.gvr.Resource, err)
			}
			for i := range l.Items {
				items = append(items, &l.Items[i])
			}
		}
		for _, o := range items {
			if strings.HasPrefix(o.GetName(), leftoverPrefix) || o.GetLabels()["app.kubernetes.io/instance"] == ReleaseName {
				out = append(out, fmt.Sprintf("%s %s/%s", k.gvr.Resource, o.GetNamespace(), o.GetName()))
			}
		}
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes.Items {
		for key := range n.Annotations {
			if strings.HasPrefix(key, "gpushare.io/") {
				out = append(out, fmt.Sprintf("node %s annotation %s", n.Name, key))
			}
		}
		for key := range n.Labels {
			if strings.HasPrefix(key, "gpushare.io/") || slices.Contains(gpushare.NVIDIALabels, key) {
				out = append(out, fmt.Sprintf("node %s label %s", n.Name, key))
			}
		}
		for _, tn := range n.Spec.Taints {
			if strings.HasPrefix(tn.Key, "gpushare.io/") {
				out = append(out, fmt.Sprintf("node %s taint %s:%s", n.Name, tn.Key, tn.Effect))
			}
		}
		// kubelet keeps a plugin's resource in the capacity for five
		// minutes after the plugin goes, but none of it allocatable.
		for res, q := range n.Status.Allocatable {
			if strings.HasPrefix(string(res), "aliyun.com/") && !q.IsZero() {
				out = append(out, fmt.Sprintf("node %s allocatable %s=%s", n.Name, res, q.String()))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}
