package chart

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// tokenPath is where in-cluster clients (client-go's InClusterConfig,
// kube-scheduler's empty clientConnection.kubeconfig) read the token.
const tokenPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// builtinRoles are the roles outside the chart it may bind: kube-apiserver
// defines them and grants no write on any Lease with them.
var builtinRoles = map[string]bool{
	"ClusterRole/system:volume-scheduler":            true, // PVs, PVCs, StorageClasses
	"Role/extension-apiserver-authentication-reader": true, // a ConfigMap of kube-system
}

// decodeAs converts a rendered object to a typed one, failing t.
func decodeAs[T any](t *testing.T, o map[string]any) *T {
	t.Helper()
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("decoding %v %v: %v", o["kind"], field(o, "metadata", "name"), err)
	}
	return out
}

// leaseWriters reads the Roles, ClusterRoles and their bindings of objs
// and returns, for each Lease some subject may write (any verb but get,
// list and watch), "namespace/name" -> its writers ("namespace/name" of
// service accounts), and what no rule of ours should grant: a write on
// Leases of any name (create and deletecollection never carry a name,
// RBAC cannot limit them), on a name in every namespace, on another
// coordination.k8s.io resource, or a binding of a role the chart does not
// define (its lease rules are unknown to this test), builtinRoles aside.
func leaseWriters(t *testing.T, objs []map[string]any) (writers map[string][]string, problems []string) {
	t.Helper()
	roles := map[string][]rbacv1.PolicyRule{} // "Kind/namespace/name" (no namespace for ClusterRoles) -> rules
	for _, o := range objs {
		switch o["kind"] {
		case "Role":
			r := decodeAs[rbacv1.Role](t, o)
			roles["Role/"+r.Namespace+"/"+r.Name] = r.Rules
		case "ClusterRole":
			r := decodeAs[rbacv1.ClusterRole](t, o)
			roles["ClusterRole/"+r.Name] = r.Rules
		}
	}
	writers = map[string][]string{}
	for _, o := range objs {
		var ref rbacv1.RoleRef
		var subjects []rbacv1.Subject
		var ns string // "" for a ClusterRoleBinding: every namespace
		switch o["kind"] {
		case "RoleBinding":
			b := decodeAs[rbacv1.RoleBinding](t, o)
			ref, subjects, ns = b.RoleRef, b.Subjects, b.Namespace
		case "ClusterRoleBinding":
			b := decodeAs[rbacv1.ClusterRoleBinding](t, o)
			ref, subjects = b.RoleRef, b.Subjects
		default:
			continue
		}
		binding := fmt.Sprintf("%v %v", o["kind"], field(o, "metadata", "name"))
		key := "ClusterRole/" + ref.Name
		if ref.Kind == "Role" {
			key = "Role/" + ns + "/" + ref.Name
		}
		rules, ours := roles[key]
		if !ours {
			if !builtinRoles[ref.Kind+"/"+ref.Name] {
				problems = append(problems, fmt.Sprintf("%s binds %s %s, which the chart does not define and which is not known to write no Lease", binding, ref.Kind, ref.Name))
			}
			continue
		}
		for _, rule := range rules {
			if !slices.Contains(rule.APIGroups, coordinationv1.GroupName) && !slices.Contains(rule.APIGroups, "*") {
				continue
			}
			writes := slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == "get" || v == "list" || v == "watch" })
			if len(writes) == 0 {
				continue
			}
			for _, res := range rule.Resources {
				switch {
				case res != "leases":
					problems = append(problems, fmt.Sprintf("%s grants %v on %s", binding, writes, res))
				case len(rule.ResourceNames) == 0 || slices.Contains(writes, "create") || slices.Contains(writes, "deletecollection") || slices.Contains(writes, "*"):
					problems = append(problems, fmt.Sprintf("%s grants %v on Leases of any name (resourceNames %v)", binding, writes, rule.ResourceNames))
				case ns == "":
					problems = append(problems, fmt.Sprintf("%s grants %v on the Leases %v of every namespace", binding, writes, rule.ResourceNames))
				default:
					for _, name := range rule.ResourceNames {
						for _, s := range subjects {
							writers[ns+"/"+name] = append(writers[ns+"/"+name], s.Namespace+"/"+s.Name)
						}
					}
				}
			}
		}
	}
	for lease := range writers {
		sort.Strings(writers[lease])
		writers[lease] = slices.Compact(writers[lease])
	}
	return writers, problems
}

// leasesOf are the Leases objs create, "namespace/name".
func leasesOf(objs []map[string]any) map[string]bool {
	out := map[string]bool{}
	for _, o := range objs {
		if o["kind"] == "Lease" {
			out[fmt.Sprintf("%v/%v", field(o, "metadata", "namespace"), field(o, "metadata", "name"))] = true
		}
	}
	return out
}

// TestLeaseWritesNameOurLeases: in every combination and in the plain
// manifests, each Lease one of our accounts may write is one the chart
// creates, written by one account only, the component that elects with it;
// every rule that writes Leases names them in one namespace (no create:
// RBAC cannot limit it by name, so the chart creates the Leases); and no
// binding hands our accounts a role of unknown Lease rights
// (system:kube-scheduler grants create on every Lease and update on
// kube-scheduler's in every namespace, the cluster's own scheduler's
// included).
func TestLeaseWritesNameOurLeases(t *testing.T) {
	c := load(t)
	ns := Release.Namespace
	type input struct {
		name string
		objs []map[string]any
		want map[string][]string // Lease -> its one writer
	}
	var inputs []input
	for _, combo := range Combos() {
		in := input{name: combo.Name, objs: objects(t, render(t, c, combo.Values))}
		switch combo.Values["topology"] {
		case "second-scheduler":
			// kube-scheduler's election; the sidecars only read it.
			in.want = map[string][]string{ns + "/gpushare-scheduler": {ns + "/gpushare-scheduler"}}
		case "extender":
			in.want = map[string][]string{ns + "/gpushare-scheduler-extender": {ns + "/gpushare-scheduler-extender"}}
		}
		inputs = append(inputs, in)
	}
	inputs = append(inputs,
		input{name: "manifests/extender/rbac.yaml", objs: readYAML(t, "manifests/extender/rbac.yaml"),
			want: map[string][]string{"kube-system/gpushare-scheduler-extender": {"kube-system/gpushare-scheduler-extender"}}},
		input{name: "manifests/deviceplugin/rbac.yaml", objs: readYAML(t, "manifests/deviceplugin/rbac.yaml"), want: map[string][]string{}})
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			writers, problems := leaseWriters(t, in.objs)
			for _, p := range problems {
				t.Error(p)
			}
			if diff := cmp.Diff(in.want, writers); diff != "" {
				t.Errorf("Lease -> the accounts that may write it (-want +got):\n%s", diff)
			}
			created := leasesOf(in.objs)
			for lease := range writers {
				if !created[lease] {
					t.Errorf("Lease %s is written by %v but not created by these manifests (created: %v)", lease, writers[lease], created)
				}
			}
		})
	}
}

// TestSidecarHasItsOwnAccount: in the second-scheduler topology the pod's
// service account is kube-scheduler's, and only the kube-scheduler
// container mounts its token; the extender sidecar mounts, where in-cluster
// clients read it, the token of its own account (a service-account-token
// Secret), whose bindings are the extender's alone.
func TestSidecarHasItsOwnAccount(t *testing.T) {
	c := load(t)
	for _, combo := range Combos() {
		if combo.Values["topology"] != "second-scheduler" {
			continue
		}
		t.Run(combo.Name, func(t *testing.T) {
			objs := objects(t, render(t, c, combo.Values))
			d := decodeAs[appsv1.Deployment](t, find(objs, "Deployment", "gpushare-scheduler"))
			pod := d.Spec.Template.Spec
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
				t.Errorf("the scheduler pod's automountServiceAccountToken is %v; want false, or every container gets the pod's token", pod.AutomountServiceAccountToken)
			}
			if pod.ServiceAccountName != "gpushare-scheduler" {
				t.Errorf("the scheduler pod runs as %q; want gpushare-scheduler, kube-scheduler's own account", pod.ServiceAccountName)
			}
			volumes := map[string]corev1.Volume{}
			for _, v := range pod.Volumes {
				volumes[v.Name] = v
			}
			// The account each container's in-cluster clients authenticate as.
			accounts := map[string]string{}
			for _, ctr := range pod.Containers {
				for _, m := range ctr.VolumeMounts {
					if m.MountPath != tokenPath {
						continue
					}
					v := volumes[m.Name]
					switch {
					case v.Projected != nil && slices.ContainsFunc(v.Projected.Sources, func(s corev1.VolumeProjection) bool { return s.ServiceAccountToken != nil }):
						accounts[ctr.Name] = pod.ServiceAccountName
					case v.Secret != nil:
						s := find(objs, "Secret", v.Secret.SecretName)
						if s == nil {
							t.Fatalf("container %s mounts Secret %s, which the chart does not render", ctr.Name, v.Secret.SecretName)
						}
						if field(s, "type") != string(corev1.SecretTypeServiceAccountToken) {
							t.Errorf("Secret %s is of type %v; want %s", v.Secret.SecretName, field(s, "type"), corev1.SecretTypeServiceAccountToken)
						}
						accounts[ctr.Name] = fmt.Sprint(field(s, "metadata", "annotations", corev1.ServiceAccountNameKey))
					}
				}
			}
			want := map[string]string{"kube-scheduler": "gpushare-scheduler", "extender": "gpushare-scheduler-extender"}
			if diff := cmp.Diff(want, accounts); diff != "" {
				t.Errorf("container -> the account of the token mounted at %s (-want +got):\n%s", tokenPath, diff)
			}
			// The sidecar's account is bound to the extender's roles only.
			var bound []string
			for _, o := range objs {
				if o["kind"] != "RoleBinding" && o["kind"] != "ClusterRoleBinding" {
					continue
				}
				b := decodeAs[rbacv1.RoleBinding](t, o) // the fields read are common to both kinds
				if slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Name == "gpushare-scheduler-extender" }) {
					bound = append(bound, b.RoleRef.Kind+"/"+b.RoleRef.Name)
				}
			}
			sort.Strings(bound)
			if diff := cmp.Diff([]string{"ClusterRole/gpushare-scheduler-extender", "Role/gpushare-scheduler-extender-follow"}, bound); diff != "" {
				t.Errorf("the roles bound to the sidecar's account (-want +got):\n%s", diff)
			}
		})
	}
}
