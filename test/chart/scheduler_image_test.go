package chart

import (
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
