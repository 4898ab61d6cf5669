package integration

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/draview"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// The DRA driver's account and node-scope policy, as the chart installs
// them (manifests/admission/dra-driver-node-scope.yaml).
const (
	draAccount         = "gpushare-dra-driver"
	draNodeScopePolicy = "gpushare-dra-driver-node-scope"
)

// driverPod is a pod of the DRA driver's service account on node (none
// when ""), as its DaemonSet makes.
func driverPod(name, node string) *corev1.Pod {
	p := pluginPod(name, node)
	p.Spec.ServiceAccountName = draAccount
	p.Spec.Containers[0].Name, p.Spec.Containers[0].Image = "dra-driver", "gpushare-dra-driver:dev"
	return p
}

// draSlice is a ResourceSlice of driver, for node nodeName in pool pool,
// with one device.
func draSlice(name, driver, nodeName, pool string) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(nodeName),
			Pool:    resourcev1.ResourcePool{Name: pool, Generation: 1, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0"}}},
	}
}

// createSlice creates s as c (a dry run when dry).
func createSlice(c kubernetes.Interface, s *resourcev1.ResourceSlice, dry bool) func(context.Context) error {
	return func(ctx context.Context) error {
		opts := metav1.CreateOptions{}
		if dry {
			opts.DryRun = dryRun
		}
		_, err := c.ResourceV1().ResourceSlices().Create(ctx, s, opts)
		return err
	}
}

// updateSlice adds a device to slice name as c.
func updateSlice(admin, c kubernetes.Interface, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		s, err := admin.ResourceV1().ResourceSlices().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: "gpu-9"})
		_, err = c.ResourceV1().ResourceSlices().Update(ctx, s, metav1.UpdateOptions{})
		return err
	}
}

// deleteSlice deletes slice name as c.
func deleteSlice(c kubernetes.Interface, name string) func(context.Context) error {
	return func(ctx context.Context) error {
		return c.ResourceV1().ResourceSlices().Delete(ctx, name, metav1.DeleteOptions{})
	}
}

// TestDRADriverNodeScope applies the chart's accounts, RBAC and policies
// with the DRA driver (manifests/rendered/extender-dra-driver.yaml) to a
// real kube-apiserver, and checks that the driver's service account, with
// a token bound to a pod on node-a, may create, update and delete node-a's
// ResourceSlice, and is refused creating, updating or deleting node-b's,
// a slice naming node-a but another pool (or the reverse), another
// driver's slice, any other write, and everything without the node claim.
func TestDRADriverNodeScope(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	cp := framework.StartT(t, framework.Options{})
	ctx := context.Background()
	admin := cp.Client(framework.AdminUser)
	loadRendered(t, "extender-dra-driver.yaml").applyAccess(t, admin)
	// More than the chart grants, to show that the policy does not rely on
	// RBAC for what the driver never does.
	grant(t, admin, "dra-driver-extra", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: systemNamespace, Name: draAccount},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}})
	for _, n := range []string{"node-a", "node-b"} {
		if err := createNode(ctx, admin, util.MakeNode(n).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	createPods(t, admin, driverPod("driver-a", "node-a"), driverPod("driver-pending", ""))
	token := func(pod string) kubernetes.Interface {
		kc, err := cp.PodServiceAccountKubeconfig(ctx, systemNamespace, draAccount, pod, time.Hour)
		return kubeconfigClient(t, kc, err)
	}
	a, pending, unbound := token("driver-a"), token("driver-pending"), tokenClient(t, cp, draAccount)
	if err := createSlice(admin, draSlice("node-b-gpu", draview.DriverName, "node-b", "node-b"), false)(ctx); err != nil {
		t.Fatal(err)
	}
	waitEnforced(t, draNodeScopePolicy, createSlice(unbound, draSlice("probe", draview.DriverName, "node-a", "node-a"), true))

	const foreign = "may only write the ResourceSlices of driver gpu.gpushare.io whose spec.nodeName and spec.pool.name are node-a"
	runCases(t, []admissionCase{
		{name: "node-a: create its slice", do: createSlice(a, draSlice("node-a-gpu", draview.DriverName, "node-a", "node-a"), false)},
		{name: "node-a: update its slice", do: updateSlice(admin, a, "node-a-gpu")},
		{name: "node-b's slice: create", do: createSlice(a, draSlice("node-b-gpu-2", draview.DriverName, "node-b", "node-b"), true),
			policy: draNodeScopePolicy, refusal: foreign + "; CREATE of ResourceSlice node-b-gpu-2 has spec.nodeName node-b"},
		{name: "node-b's slice: update", do: updateSlice(admin, a, "node-b-gpu"),
			policy: draNodeScopePolicy, refusal: "has spec.nodeName node-b"},
		{name: "node-b's slice: delete", do: deleteSlice(a, "node-b-gpu"),
			policy: draNodeScopePolicy, refusal: "DELETE of ResourceSlice node-b-gpu has spec.nodeName node-b"},
		{name: "node-a's name, node-b's pool", do: createSlice(a, draSlice("mixed", draview.DriverName, "node-a", "node-b"), true),
			policy: draNodeScopePolicy, refusal: "has spec.pool.name node-b"},
		{name: "another driver's slice on node-a", do: createSlice(a, draSlice("other", "gpu.example.com", "node-a", "node-a"), true),
			policy: draNodeScopePolicy, refusal: "is of driver gpu.example.com"},
		{name: "another write (an event)", do: createEvent(a, "node-a"),
			policy: draNodeScopePolicy, refusal: "may only create, update and delete ResourceSlices, not CREATE events default/"},
		{name: "token of an unscheduled pod", do: createSlice(pending, draSlice("node-a-gpu-2", draview.DriverName, "node-a", "node-a"), true),
			policy: draNodeScopePolicy, refusal: "token carries no node claim"},
		{name: "token bound to nothing: delete", do: deleteSlice(unbound, "node-a-gpu"),
			policy: draNodeScopePolicy, refusal: "token carries no node claim"},
		{name: "node-a: delete its slice", do: deleteSlice(a, "node-a-gpu")},
	})
}
