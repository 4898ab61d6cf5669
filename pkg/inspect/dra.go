package inspect

import (
	"context"
	"maps"
	"slices"
	"sort"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/draview"
)

// sourceDRA is Node.Source for a node whose cards the DRA driver
// publishes (package draview reads them).
const sourceDRA = "dra"

// DRA states of PodShare: a claim a pod has reserved, or one allocated
// that no pod uses yet.
const (
	stateReserved  = "reserved"
	stateAllocated = "allocated"
)

// DRAAPI is the slice of resource.k8s.io/v1 the plugin reads.
type DRAAPI interface {
	ListResourceSlices(ctx context.Context) ([]resourcev1.ResourceSlice, error)
	ListResourceClaims(ctx context.Context) ([]resourcev1.ResourceClaim, error)
}

var _ DRAAPI = ClientAPI{}

// ListResourceSlices implements DRAAPI: the slices of the DRA driver.
func (a ClientAPI) ListResourceSlices(ctx context.Context) ([]resourcev1.ResourceSlice, error) {
	l, err := a.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourcev1.ResourceSliceSelectorDriver + "=" + draview.DriverName})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// ListResourceClaims implements DRAAPI: the claims of every namespace.
func (a ClientAPI) ListResourceClaims(ctx context.Context) ([]resourcev1.ResourceClaim, error) {
	l, err := a.Client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// readDRA lists the DRA driver's slices and the claims, or nothing when the
// cluster has no resource.k8s.io/v1 (before Kubernetes 1.34) or the user
// may not read them, which it logs: the device plugin's nodes are shown
// either way.
func readDRA(ctx context.Context, api DRAAPI) ([]resourcev1.ResourceSlice, []resourcev1.ResourceClaim) {
	logger := klog.FromContext(ctx)
	slices, err := api.ListResourceSlices(ctx)
	if err == nil && len(slices) == 0 {
		return nil, nil
	}
	var claims []resourcev1.ResourceClaim
	if err == nil {
		claims, err = api.ListResourceClaims(ctx)
	}
	switch {
	case err == nil:
		return slices, claims
	case apierrors.IsNotFound(err):
		logger.V(2).Info("No resource.k8s.io/v1 in this cluster: no DRA allocations to show")
	default:
		logger.Info("Not showing DRA allocations (the plugin needs list on resourceslices and resourceclaims in resource.k8s.io)", "err", err.Error())
	}
	return nil, nil
}

// draNodes returns the Node of each node the DRA driver publishes cards
// for, name -> node: a card per device of the driver's newest slices of the
// node's pool (the driver's pool is its node), with what the allocated
// claims hold on it, in the node's unit (the devices' request step, GiB or
// MiB). A claim's share is listed under the pod that reserved it
// (stateReserved), else under the claim's own name (stateAllocated). A
// claim whose result names a device no slice has is not counted.
func draNodes(slices []resourcev1.ResourceSlice, claims []resourcev1.ResourceClaim, address map[string]string) map[string]*Node {
	newest := map[string]int64{} // pool -> newest generation
	for i := range slices {
		s := &slices[i].Spec
		if s.Driver == draview.DriverName && s.NodeName != nil && s.Pool.Generation > newest[s.Pool.Name] {
			newest[s.Pool.Name] = s.Pool.Generation
		}
	}
	nodes := map[string]*Node{}
	type key struct{ pool, device string }
	type ref struct {
		node  string
		index int
	}
	devs := map[key]ref{}
	for i := range slices {
		s := &slices[i].Spec
		if s.Driver != draview.DriverName || s.NodeName == nil || s.Pool.Generation != newest[s.Pool.Name] {
			continue
		}
		n := nodes[*s.NodeName]
		if n == nil {
			n = &Node{Name: *s.NodeName, Address: address[*s.NodeName], Source: sourceDRA, Cards: []Card{}}
			nodes[*s.NodeName] = n
		}
		for _, d := range s.Devices {
			dc, ok := draview.ReadCard(&d)
			if !ok {
				continue
			}
			if n.Unit == "" {
				n.Unit = dc.Unit
			}
			c := Card{Index: dc.Index, UUID: dc.UUID, Model: dc.Model, Isolation: dc.Isolation, Healthy: dc.Healthy,
				Total: dc.Bytes / draview.UnitBytes(n.Unit), Pods: []PodShare{}}
			n.Cards = append(n.Cards, c)
			devs[key{s.Pool.Name, d.Name}] = ref{n.Name, c.Index}
		}
	}
	for _, n := range nodes {
		sort.Slice(n.Cards, func(a, b int) bool { return n.Cards[a].Index < n.Cards[b].Index })
	}
	card := func(r ref) *Card {
		n := nodes[r.node]
		for i := range n.Cards {
			if n.Cards[i].Index == r.index {
				return &n.Cards[i]
			}
		}
		return nil
	}
	for i := range claims {
		cl := &claims[i]
		if cl.Status.Allocation == nil {
			continue
		}
		share := PodShare{Namespace: cl.Namespace, Name: cl.Name, State: stateAllocated}
		for _, r := range cl.Status.ReservedFor {
			if r.Resource == "pods" && r.APIGroup == "" {
				share.Name, share.State = r.Name, stateReserved
				break
			}
		}
		for _, r := range draview.Shares(cl) {
			at, ok := devs[key{r.Pool, r.Device}]
			if !ok {
				continue
			}
			c := card(at)
			units := c.Total // no consumed capacity: the whole card
			if r.Bytes > 0 {
				units = draview.Units(r.Bytes, nodes[at.node].Unit)
			}
			s := share
			s.Units = units
			c.Pods = append(c.Pods, s)
			c.Allocated += units
		}
	}
	for _, n := range nodes {
		for i := range n.Cards {
			c := &n.Cards[i]
			sort.Slice(c.Pods, func(a, b int) bool {
				if c.Pods[a].Namespace != c.Pods[b].Namespace {
					return c.Pods[a].Namespace < c.Pods[b].Namespace
				}
				return c.Pods[a].Name < c.Pods[b].Name
			})
			n.Allocated += c.Allocated
			n.Total += c.Total
		}
	}
	return nodes
}

// mergeDRA puts the DRA driver's nodes into r, among those shown: a node
// the device plugin publishes no cards for becomes the driver's (a node
// runs one or the other); one with the device plugin's cards keeps them,
// and is logged. Totals are summed again.
func mergeDRA(ctx context.Context, r *Report, dra map[string]*Node, shown map[string]bool) {
	if len(dra) == 0 {
		return
	}
	at := map[string]int{}
	for i := range r.Nodes {
		at[r.Nodes[i].Name] = i
	}
	for _, name := range slices.Sorted(maps.Keys(dra)) {
		if !shown[name] {
			continue
		}
		i, ok := at[name]
		switch {
		case !ok:
			r.Nodes = append(r.Nodes, *dra[name])
		case len(r.Nodes[i].Cards) == 0:
			r.Nodes[i] = *dra[name]
		default:
			klog.FromContext(ctx).Info("Node has cards from both the device plugin and the DRA driver; showing the device plugin's", "node", name)
		}
	}
	sort.Slice(r.Nodes, func(a, b int) bool { return r.Nodes[a].Name < r.Nodes[b].Name })
	r.Totals = totals(r.Nodes)
}
