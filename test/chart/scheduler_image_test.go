package chart

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestSchedulerImageFollowsCluster: the second scheduler's image is the
// cluster's own kube-scheduler version unless scheduler.image.tag says
// otherwise, and a tag outside the version skew policy fails the render
// with the fix.
func TestSchedulerImageFollowsCluster(t *testing.T) {
	c := load(t)
	for _, tc := range []struct {
		name, cluster, tag string
		want               string // the image; empty: the render must fail
		wantErr            string
	}{
		{name: "default follows the cluster", cluster: "v1.31.4", want: "registry.k8s.io/kube-scheduler:v1.31.4"},
		{name: "a managed cluster's suffix is dropped", cluster: "v1.32.9-eks-1552ad0", want: "registry.k8s.io/kube-scheduler:v1.32.9"},
		{name: "the test harness's version", cluster: "v1.34.3", want: "registry.k8s.io/kube-scheduler:v1.34.3"},
		{name: "same minor", cluster: "v1.31.4", tag: "v1.31.1", want: "registry.k8s.io/kube-scheduler:v1.31.1"},
		{name: "one minor older", cluster: "v1.31.4", tag: "v1.30.9", want: "registry.k8s.io/kube-scheduler:v1.30.9"},
		{name: "two minors older", cluster: "v1.31.4", tag: "v1.29.0", wantErr: "scheduler.image.tag v1.29.0 does not fit the cluster's Kubernetes v1.31.4"},
		{name: "newer than the cluster", cluster: "v1.31.4", tag: "v1.34.3", wantErr: "set a version from v1.30 to v1.31"},
		{name: "not a version", cluster: "v1.31.4", tag: "corp-build-7", want: "registry.k8s.io/kube-scheduler:corp-build-7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{}
			if tc.tag != "" {
				values["scheduler"] = map[string]any{"image": map[string]any{"tag": tc.tag}}
			}
			r, err := RenderAt(c, values, tc.cluster)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			dep := find(objects(t, r), "Deployment", "gpushare-scheduler")
			var got string
			for _, ctr := range field(dep, "spec", "template", "spec", "containers").([]any) {
				if field(ctr, "name") == "kube-scheduler" {
					got, _ = field(ctr, "image").(string)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("kube-scheduler image (-want +got):\n%s", diff)
			}
			if !strings.Contains(r.Notes, tc.want) {
				t.Errorf("NOTES.txt does not name the image %s:\n%s", tc.want, r.Notes)
			}
		})
	}
}

// TestSchedulerRoleFollowsVersion: the second scheduler's ClusterRole
// grants the DRA rules the built-in system:kube-scheduler of its
// kube-scheduler's version has (the gates on by default there, read from
// k8s.io/kubernetes v1.37.2 pkg/features): from v1.36 claims it creates
// and deletes and their binding status, from v1.37 device taint rules.
// Its version is scheduler.image.tag's when that is one, else the
// cluster's. (TestChartLeases compares the v1.34.3 and v1.37.2 roles with
// kube-apiserver's own.)
func TestSchedulerRoleFollowsVersion(t *testing.T) {
	c := load(t)
	const (
		claims  = "create,delete resource.k8s.io/resourceclaims"
		binding = "update,patch resource.k8s.io/resourceclaims/binding"
		taints  = "get,list,watch resource.k8s.io/devicetaintrules"
	)
	for _, tc := range []struct {
		name, cluster, tag string
		want               []string
	}{
		{name: "v1.34", cluster: "v1.34.3"},
		{name: "v1.35", cluster: "v1.35.0"},
		{name: "v1.36", cluster: "v1.36.2", want: []string{claims, binding}},
		{name: "v1.37", cluster: "v1.37.2", want: []string{claims, binding, taints}},
		{name: "v1.36 scheduler on v1.37", cluster: "v1.37.2", tag: "v1.36.4", want: []string{claims, binding}},
		{name: "a build that is no version", cluster: "v1.37.2", tag: "corp-build-7", want: []string{claims, binding, taints}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{}
			if tc.tag != "" {
				values["scheduler"] = map[string]any{"image": map[string]any{"tag": tc.tag}}
			}
			r, err := RenderAt(c, values, tc.cluster)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, rule := range field(find(objects(t, r), "ClusterRole", "gpushare-scheduler"), "rules").([]any) {
				var verbs, res []string
				for _, v := range field(rule, "verbs").([]any) {
					verbs = append(verbs, v.(string))
				}
				for _, x := range field(rule, "resources").([]any) {
					res = append(res, x.(string))
				}
				groups := field(rule, "apiGroups").([]any)
				line := strings.Join(verbs, ",") + " " + groups[0].(string) + "/" + strings.Join(res, ",")
				if slices.Contains([]string{claims, binding, taints}, line) {
					got = append(got, line)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("the version's DRA rules of ClusterRole gpushare-scheduler (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodsArePartOfGpushare: every pod template carries
// app.kubernetes.io/part-of=gpushare, the label docs/install.md and
// NOTES.txt select the pods by, in every combination.
func TestPodsArePartOfGpushare(t *testing.T) {
	c := load(t)
	for _, combo := range Combos() {
		templates := 0
		for _, o := range objects(t, render(t, c, combo.Values)) {
			switch o["kind"] {
			case "Deployment", "DaemonSet", "StatefulSet", "Job":
			default:
				continue
			}
			templates++
			if got := field(o, "spec", "template", "metadata", "labels", "app.kubernetes.io/part-of"); got != "gpushare" {
				t.Errorf("%s: %s %s: pod template label app.kubernetes.io/part-of = %v, want gpushare", combo.Name, o["kind"], field(o, "metadata", "name"), got)
			}
		}
		if templates < 2 {
			t.Errorf("%s: %d pod templates, want the scheduler's or extender's and the device plugin's", combo.Name, templates)
		}
	}
}
