package chart

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// containerOf is the named container of the named Deployment of objs.
func containerOf(t *testing.T, objs []map[string]any, deployment, name string) map[string]any {
	t.Helper()
	d := find(objs, "Deployment", deployment)
	containers, _ := field(d, "spec", "template", "spec", "containers").([]any)
	for _, c := range containers {
		if field(c, "name") == name {
			return c.(map[string]any)
		}
	}
	t.Fatalf("no container %s in Deployment %s", name, deployment)
	return nil
}

// argsOf are a container's args as strings.
func argsOf(c map[string]any) []string {
	var out []string
	for _, a := range field(c, "args").([]any) {
		out = append(out, fmt.Sprint(a))
	}
	return out
}

// flagValues are the values of flag (--name=value, or "" for a bare --name)
// in args, in order.
func flagValues(args []string, flag string) []string {
	var out []string
	for _, a := range args {
		if a == flag {
			out = append(out, "")
		} else if v, ok := strings.CutPrefix(a, flag+"="); ok {
			out = append(out, v)
		}
	}
	return out
}

// envNames are the names of a container's environment variables.
func envNames(c map[string]any) []string {
	var out []string
	env, _ := field(c, "env").([]any)
	for _, e := range env {
		out = append(out, fmt.Sprint(field(e, "name")))
	}
	return out
}

// TestExtenderTopologyHA: the extender Deployment runs extender.replicas
// replicas that always elect a leader on the Lease rbac.yaml grants, with
// the pod name as identity; the rollout strategy and the PDB let a
// Deployment whose only ready pod is the leader roll and drain; /readyz is
// the readiness probe; replicas prefer distinct nodes.
func TestExtenderTopologyHA(t *testing.T) {
	c := load(t)
	for _, tc := range []struct {
		name     string
		extender map[string]any
		replicas int
		election []string // lease duration, renew deadline, retry period
	}{
		{name: "defaults", replicas: 2, election: []string{"15s", "10s", "2s"}},
		{name: "one replica is elected too", extender: map[string]any{"replicas": 1}, replicas: 1, election: []string{"15s", "10s", "2s"}},
		{name: "three replicas, longer lease", replicas: 3, election: []string{"30s", "20s", "3s"},
			extender: map[string]any{"replicas": 3, "leaderElection": map[string]any{"leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "3s"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{"topology": "extender"}
			if tc.extender != nil {
				values["extender"] = tc.extender // a nil would delete the defaults
			}
			r := render(t, c, values)
			objs := objects(t, r)
			d := find(objs, "Deployment", "gpushare-scheduler-extender")
			if got := field(d, "spec", "replicas"); got != float64(tc.replicas) {
				t.Errorf("replicas %v, want %d", got, tc.replicas)
			}
			wantStrategy := map[string]any{"type": "RollingUpdate", "rollingUpdate": map[string]any{"maxSurge": float64(1), "maxUnavailable": "100%"}}
			if diff := cmp.Diff(wantStrategy, field(d, "spec", "strategy")); diff != "" {
				t.Errorf("strategy (-want +got):\n%s", diff)
			}
			ext := containerOf(t, objs, "gpushare-scheduler-extender", "extender")
			args := argsOf(ext)
			for flag, want := range map[string]string{
				"--leader-elect":                    "",
				"--leader-elect-resource-namespace": Release.Namespace,
				"--leader-elect-resource-name":      "gpushare-scheduler-extender",
				"--leader-elect-lease-duration":     tc.election[0],
				"--leader-elect-renew-deadline":     tc.election[1],
				"--leader-elect-retry-period":       tc.election[2],
			} {
				if got := flagValues(args, flag); len(got) != 1 || got[0] != want {
					t.Errorf("%s: %q, want once %q (args %v)", flag, got, want, args)
				}
			}
			if got := flagValues(args, "--follow-scheduler-lease"); got != nil {
				t.Errorf("--follow-scheduler-lease %q in the extender topology", got)
			}
			// The identity is the pod name, from the downward API.
			if diff := cmp.Diff([]any{map[string]any{"name": "POD_NAME", "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": "metadata.name"}}}},
				field(ext, "env")); diff != "" {
				t.Errorf("env (-want +got):\n%s", diff)
			}
			if got := field(ext, "readinessProbe", "httpGet", "path"); got != "/readyz" {
				t.Errorf("readinessProbe path %v, want /readyz (ready only on the leader)", got)
			}
			terms, _ := field(d, "spec", "template", "spec", "affinity", "podAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution").([]any)
			if len(terms) != 1 || field(terms[0], "podAffinityTerm", "topologyKey") != "kubernetes.io/hostname" ||
				field(terms[0], "podAffinityTerm", "labelSelector", "matchLabels", "app.kubernetes.io/name") != "gpushare-scheduler-extender" {
				t.Errorf("podAntiAffinity %v, want one preferred term across hosts on the extender's pods", terms)
			}
			// The election's Lease is the one rbac.yaml creates and grants.
			role := find(objs, "Role", "gpushare-scheduler-extender-leader-election")
			if field(role, "metadata", "namespace") != Release.Namespace {
				t.Errorf("the leader election Role is in %v, want %s", field(role, "metadata", "namespace"), Release.Namespace)
			}
			if got := fmt.Sprint(field(role, "rules")); !strings.Contains(got, "resourceNames:[gpushare-scheduler-extender]") {
				t.Errorf("the leader election Role %s does not name the Lease gpushare-scheduler-extender", got)
			}
			if find(objs, "Lease", "gpushare-scheduler-extender") == nil {
				t.Errorf("the chart creates no Lease gpushare-scheduler-extender")
			}
			pdb := find(objs, "PodDisruptionBudget", "gpushare-scheduler-extender")
			if got := field(pdb, "spec", "maxUnavailable"); got != "100%" {
				t.Errorf("PDB maxUnavailable %v, want 100%% (only the leader is ever ready)", got)
			}
			if !strings.Contains(r.Notes, "only the leader is\nReady") {
				t.Errorf("NOTES.txt does not say that only the leader is Ready")
			}
		})
	}
}

// TestSidecarFollowsTheSchedulersLease: each sidecar follows the Lease of
// its kube-scheduler's configuration (resourceNamespace/resourceName), with
// the scheduler's renew deadline, and takes the host name as identity (no
// --leader-elect-identity, no POD_NAME): kube-scheduler's holder identity
// is "<host name>_<uuid>".
func TestSidecarFollowsTheSchedulersLease(t *testing.T) {
	c := load(t)
	for _, tc := range []struct {
		name      string
		scheduler map[string]any
	}{
		{name: "defaults"},
		{name: "another scheduler name and timing", scheduler: map[string]any{"name": "gpu-sched",
			"leaderElection": map[string]any{"leaseDuration": "40s", "renewDeadline": "30s", "retryPeriod": "4s"}}},
		{name: "no webhook", scheduler: map[string]any{"webhook": map[string]any{"enabled": false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{}
			if tc.scheduler != nil {
				values["scheduler"] = tc.scheduler
			}
			objs := objects(t, render(t, c, values))
			cfg := schedulerConfig(t, objs, "gpushare-scheduler-config")
			le, _ := field(cfg, "leaderElection").(map[string]any)
			if le["leaderElect"] != true || le["resourceLock"] != "leases" {
				t.Fatalf("leaderElection %v: want leases, on", le)
			}
			sidecar := containerOf(t, objs, "gpushare-scheduler", "extender")
			args := argsOf(sidecar)
			want := map[string][]string{
				"--follow-scheduler-lease":      {fmt.Sprintf("%v/%v", le["resourceNamespace"], le["resourceName"])},
				"--leader-elect-renew-deadline": {fmt.Sprint(le["renewDeadline"])},
			}
			for _, flag := range []string{"--leader-elect", "--leader-elect-identity", "--leader-elect-resource-namespace", "--leader-elect-resource-name"} {
				want[flag] = nil
			}
			for flag, w := range want {
				if diff := cmp.Diff(w, flagValues(args, flag)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", flag, diff)
				}
			}
			if got := fmt.Sprint(le["resourceName"]); got != fmt.Sprint(field(tc.scheduler, "name")) && field(tc.scheduler, "name") != nil {
				t.Errorf("lease name %s, want scheduler.name %v", got, field(tc.scheduler, "name"))
			}
			if le["resourceNamespace"] != Release.Namespace {
				t.Errorf("lease namespace %v, want the release's %s", le["resourceNamespace"], Release.Namespace)
			}
			if tc.scheduler["leaderElection"] != nil {
				if diff := cmp.Diff(tc.scheduler["leaderElection"], map[string]any{"leaseDuration": le["leaseDuration"], "renewDeadline": le["renewDeadline"], "retryPeriod": le["retryPeriod"]}); diff != "" {
					t.Errorf("leaderElection timing (-values +config):\n%s", diff)
				}
			}
			if slices.Contains(envNames(sidecar), "POD_NAME") {
				t.Errorf("the sidecar has POD_NAME: its identity must be the host name kube-scheduler uses")
			}
			// The Roles of the scheduler's election and of the sidecars'
			// following name the same Lease, which the chart creates.
			for _, name := range []string{"gpushare-scheduler-leader-election", "gpushare-scheduler-extender-follow"} {
				rules, _ := field(find(objs, "Role", name), "rules").([]any)
				if len(rules) != 1 || fmt.Sprint(field(rules[0], "resourceNames")) != fmt.Sprintf("[%v]", le["resourceName"]) {
					t.Errorf("the Role %s (%v) does not name lease %v alone", name, rules, le["resourceName"])
				}
			}
			if find(objs, "Lease", fmt.Sprint(le["resourceName"])) == nil {
				t.Errorf("the chart creates no Lease %v", le["resourceName"])
			}
		})
	}
}

// TestSchemaRefusesBadHAValues: no replica count below 1, durations with
// units, no unknown keys in leaderElection.
func TestSchemaRefusesBadHAValues(t *testing.T) {
	c := load(t)
	for _, values := range []map[string]any{
		{"extender": map[string]any{"replicas": 0}},
		{"extender": map[string]any{"leaderElection": map[string]any{"leaseDuration": "15", "renewDeadline": "10s", "retryPeriod": "2s"}}},
		{"scheduler": map[string]any{"leaderElection": map[string]any{"leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s", "leaseName": "x"}}},
	} {
		if _, err := Render(c, values, nil); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("values %v: err = %v, want a schema error", values, err)
		}
	}
}
