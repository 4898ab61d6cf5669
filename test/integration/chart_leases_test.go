package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/test/integration/framework"
)

// controlPlaneLeases are Leases every cluster's kube-system holds, of
// components that are not ours.
var controlPlaneLeases = []string{"kube-controller-manager", "kube-scheduler"}

// leaseProbe is one container of the chart and what its account may do
// with Leases.
type leaseProbe struct {
	deployment, container string
	// writes is the one Lease it may update ("": none).
	writes string
	// reads is a Lease it may read, by name, but not write ("": none).
	reads string
}

// TestChartLeases applies the rendered chart's accounts, RBAC and Leases
// (applyAccess) to a real kube-apiserver whose kube-system also holds the
// Leases of kube-controller-manager and of the cluster's kube-scheduler,
// and sends real requests as the account each container runs as
// (tokenAccount): each may update the Lease it elects with and no other,
// may create and delete none, and the sidecar reads the Lease it follows,
// by name only. In the second-scheduler topology the chart's ClusterRole
// for kube-scheduler is this kube-apiserver's own system:kube-scheduler
// less its Lease and LeaseCandidate rules, for the version the chart runs.
func TestChartLeases(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	for _, tc := range []struct {
		file   string
		probes []leaseProbe
	}{
		{file: "second-scheduler.yaml", probes: []leaseProbe{
			{deployment: "gpushare-scheduler", container: "kube-scheduler", writes: "gpushare-scheduler"},
			{deployment: "gpushare-scheduler", container: "extender", reads: "gpushare-scheduler"},
		}},
		{file: "extender.yaml", probes: []leaseProbe{
			{deployment: "gpushare-scheduler-extender", container: "extender", writes: "gpushare-scheduler-extender"},
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			ctx := context.Background()
			cp := framework.StartT(t, framework.Options{})
			chart := loadRenderedFor(t, cp.Version(), tc.file)
			admin := cp.Client(framework.AdminUser)
			leases := admin.CoordinationV1().Leases(systemNamespace)
			for _, name := range controlPlaneLeases {
				l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("cp-1_" + name), LeaseDurationSeconds: ptr.To[int32](15)}}
				if _, err := leases.Create(ctx, l, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			chart.applyAccess(t, admin)
			all, err := leases.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range tc.probes {
				account := chart.tokenAccount(t, p.deployment, p.container)
				t.Run(p.container+" as "+account, func(t *testing.T) {
					probeLeases(t, admin, tokenClient(t, cp, account), all.Items, p)
				})
			}
			if tc.file == "second-scheduler.yaml" {
				checkSchedulerRole(t, admin, chart, cp.Version())
			}
		})
	}
}

// probeLeases tries, as client, to update each of leases, to create and
// delete one, and to read p.reads by name and without.
func probeLeases(t *testing.T, admin, client kubernetes.Interface, leases []coordinationv1.Lease, p leaseProbe) {
	t.Helper()
	ctx := context.Background()
	mine := client.CoordinationV1().Leases(systemNamespace)
	updated := map[string]bool{} // Lease -> the update went through
	for _, l := range leases {
		fresh, err := admin.CoordinationV1().Leases(systemNamespace).Get(ctx, l.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fresh.Spec.HolderIdentity = ptr.To("intruder")
		_, err = mine.Update(ctx, fresh, metav1.UpdateOptions{})
		switch {
		case err == nil:
			updated[l.Name] = true
		case !apierrors.IsForbidden(err):
			t.Errorf("updating Lease %s: %v, want success or forbidden", l.Name, err)
		}
	}
	want := map[string]bool{}
	if p.writes != "" {
		want[p.writes] = true
	}
	if diff := cmp.Diff(want, updated); diff != "" {
		t.Errorf("the Leases this account could update (-want +got):\n%s", diff)
	}
	squat := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "cloud-controller-manager"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("intruder"), LeaseDurationSeconds: ptr.To[int32](1 << 30)}}
	if _, err := mine.Create(ctx, squat, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("creating Lease %s (one not made yet): %v, want forbidden", squat.Name, err)
	}
	if err := mine.Delete(ctx, controlPlaneLeases[0], metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("deleting Lease %s: %v, want forbidden", controlPlaneLeases[0], err)
	}
	if p.reads == "" {
		return
	}
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", p.reads).String()}
	if _, err := mine.Get(ctx, p.reads, metav1.GetOptions{}); err != nil {
		t.Errorf("reading Lease %s: %v", p.reads, err)
	}
	if _, err := mine.List(ctx, byName); err != nil {
		t.Errorf("listing Lease %s by name (the follower's informer): %v", p.reads, err)
	}
	w, err := mine.Watch(ctx, byName)
	if err != nil {
		t.Errorf("watching Lease %s by name (the follower's informer): %v", p.reads, err)
	} else {
		w.Stop()
	}
	if _, err := mine.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("listing every Lease: %v, want forbidden", err)
	}
}

// permissions expands rules into sorted "verb group/resource[/name]" lines,
// leaving out those of the API groups skip.
func permissions(rules []rbacv1.PolicyRule, skip ...string) []string {
	var out []string
	for _, r := range rules {
		names := r.ResourceNames
		if len(names) == 0 {
			names = []string{""}
		}
		for _, g := range r.APIGroups {
			if slices.Contains(skip, g) {
				continue
			}
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					for _, n := range names {
						out = append(out, strings.TrimSuffix(fmt.Sprintf("%s %s/%s/%s", v, g, res, n), "/"))
					}
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// checkSchedulerRole: the chart runs kube-scheduler of this kube-apiserver's
// version, and its ClusterRole gpushare-scheduler grants what this
// kube-apiserver's system:kube-scheduler grants, less Leases and
// LeaseCandidates (coordination.k8s.io).
func checkSchedulerRole(t *testing.T, admin kubernetes.Interface, chart renderedChart, version string) {
	t.Helper()
	if img := chart.container(t, "gpushare-scheduler", "kube-scheduler").Image; !strings.HasSuffix(img, ":"+version) {
		t.Errorf("the chart runs %s, this test kube-apiserver %s: compare the ClusterRole gpushare-scheduler with that version's system:kube-scheduler (a rendering for it: test/chart VersionedPlain)", img, version)
	}
	builtin, err := admin.RbacV1().ClusterRoles().Get(context.Background(), "system:kube-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ours *rbacv1.ClusterRole
	for _, o := range chart.objs {
		if r, ok := o.(*rbacv1.ClusterRole); ok && r.Name == "gpushare-scheduler" {
			ours = r
		}
	}
	if ours == nil {
		t.Fatal("the chart renders no ClusterRole gpushare-scheduler")
	}
	if got := permissions(ours.Rules); slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, " "+coordinationv1.GroupName+"/") }) {
		t.Errorf("the ClusterRole gpushare-scheduler grants on %s: %v", coordinationv1.GroupName, got)
	}
	if diff := cmp.Diff(permissions(builtin.Rules, coordinationv1.GroupName), permissions(ours.Rules)); diff != "" {
		t.Errorf("the ClusterRole gpushare-scheduler against system:kube-scheduler less its Lease rules (-builtin +chart):\n%s", diff)
	}
}
