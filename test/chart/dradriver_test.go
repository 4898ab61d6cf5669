package chart

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDRADriverOptIn: the DRA driver's objects render only with
// draDriver.enabled; then the DaemonSet runs on the device plugin's nodes
// that carry draDriver.nodeSelector's labels, the device plugin keeps off
// them, the driver gets the device plugin's node settings and leaves mps
// mode's daemons to their DaemonSet (which it needs on its nodes too),
// and the DeviceClass selects the driver's devices.
func TestDRADriverOptIn(t *testing.T) {
	c := load(t)
	off := objects(t, render(t, c, nil))
	for _, kind := range []string{"DaemonSet", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
		if find(off, kind, "gpushare-dra-driver") != nil {
			t.Errorf("draDriver disabled (the default): %s gpushare-dra-driver rendered", kind)
		}
	}
	if find(off, "DeviceClass", "gpu-mem.gpushare.io") != nil {
		t.Error("draDriver disabled: DeviceClass rendered")
	}
	if aff := field(find(off, "DaemonSet", "gpushare-device-plugin"), "spec", "template", "spec", "affinity"); aff != nil {
		t.Errorf("draDriver disabled: the device plugin has an affinity %v", aff)
	}

	objs := objects(t, render(t, c, map[string]any{
		"draDriver":    map[string]any{"enabled": true, "deviceOrder": "smallest-first"},
		"devicePlugin": map[string]any{"mpsRoot": "/run/mps", "isolation": "auto"},
	}))
	ds := find(objs, "DaemonSet", "gpushare-dra-driver")
	if ds == nil {
		t.Fatal("draDriver enabled: no DaemonSet gpushare-dra-driver")
	}
	pod := field(ds, "spec", "template", "spec")
	ctr := field(pod, "containers").([]any)[0]
	if diff := cmp.Diff(map[string]any{"gpushare": "true", "gpushare.io/device-mode": "dra"}, field(pod, "nodeSelector")); diff != "" {
		t.Errorf("driver's nodeSelector (-want +got):\n%s", diff)
	}
	wantArgs := []any{"--memory-unit=GiB", "--device-order=smallest-first", "--health-check=true", "--kubelet-dir=/var/lib/kubelet",
		"--isolation=auto", "--cdi-dir=/var/run/cdi", "--mps-root=/run/mps", "--mps-daemons=external", "-v=2"}
	if diff := cmp.Diff(wantArgs, field(ctr, "args")); diff != "" {
		t.Errorf("driver's args (-want +got):\n%s", diff)
	}
	mounts := map[string]string{}
	volumes := map[string]any{}
	for _, v := range field(pod, "volumes").([]any) {
		volumes[field(v, "name").(string)] = field(v, "hostPath", "path")
	}
	for _, m := range field(ctr, "volumeMounts").([]any) {
		mounts[field(m, "mountPath").(string)], _ = volumes[field(m, "name").(string)].(string)
	}
	wantMounts := map[string]string{
		"/var/lib/kubelet/plugins/gpu.gpushare.io": "/var/lib/kubelet/plugins/gpu.gpushare.io",
		"/var/lib/kubelet/plugins_registry":        "/var/lib/kubelet/plugins_registry",
		"/var/run/cdi":                             "/var/run/cdi",
		"/run/mps":                                 "/run/mps",
		"/dev/shm":                                 "/run/mps/shm",
	}
	if diff := cmp.Diff(wantMounts, mounts); diff != "" {
		t.Errorf("driver's mounts, container path -> host path (-want +got):\n%s", diff)
	}
	wantAffinity := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "gpushare.io/device-mode", "operator": "NotIn", "values": []any{"dra"}}}}},
	}}}
	if diff := cmp.Diff(wantAffinity, field(find(objs, "DaemonSet", "gpushare-device-plugin"), "spec", "template", "spec", "affinity")); diff != "" {
		t.Errorf("device plugin's affinity with the driver enabled (-want +got):\n%s", diff)
	}
	mps := find(objs, "DaemonSet", "gpushare-mps-daemons")
	if mps == nil || field(mps, "spec", "template", "spec", "affinity") != nil {
		t.Errorf("mps-daemons DaemonSet %v: want it rendered, on the driver's nodes too (no affinity)", mps)
	}
	wantClass := map[string]any{"selectors": []any{map[string]any{"cel": map[string]any{"expression": `device.driver == "gpu.gpushare.io"`}}}}
	if diff := cmp.Diff(wantClass, field(find(objs, "DeviceClass", "gpu-mem.gpushare.io"), "spec")); diff != "" {
		t.Errorf("DeviceClass spec (-want +got):\n%s", diff)
	}

	// Without mps, the driver runs no MPS daemons and is not told to
	// leave them elsewhere; with the device plugin off it still gets them.
	noMPS := objects(t, render(t, c, map[string]any{"draDriver": map[string]any{"enabled": true}, "devicePlugin": map[string]any{"isolation": "driver"}}))
	for _, a := range field(field(find(noMPS, "DaemonSet", "gpushare-dra-driver"), "spec", "template", "spec", "containers").([]any)[0], "args").([]any) {
		if a == "--mps-daemons=external" {
			t.Error("isolation driver: the driver is told its MPS daemons run elsewhere")
		}
	}
	alone := objects(t, render(t, c, map[string]any{"draDriver": map[string]any{"enabled": true}, "devicePlugin": map[string]any{"enabled": false}}))
	if find(alone, "DaemonSet", "gpushare-mps-daemons") == nil || find(alone, "DaemonSet", "gpushare-device-plugin") != nil {
		t.Error("driver without the device plugin: want the mps-daemons DaemonSet and no device plugin")
	}
}

// TestDRADriverRBAC: the driver's ClusterRole grants exactly what kubelet's
// plugin library calls for it (k8s.io/dynamic-resource-allocation v0.37:
// the ResourceSlice controller lists, watches, creates, updates and
// deletes the node's slices and reads the Node it owns them by; Prepare
// reads each claim) and what the driver reads itself (the node's pods,
// and the claims it prepared).
func TestDRADriverRBAC(t *testing.T) {
	objs := objects(t, render(t, load(t), map[string]any{"draDriver": map[string]any{"enabled": true}}))
	want := []any{
		map[string]any{"apiGroups": []any{"resource.k8s.io"}, "resources": []any{"resourceslices"}, "verbs": []any{"list", "watch", "create", "update", "delete"}},
		map[string]any{"apiGroups": []any{"resource.k8s.io"}, "resources": []any{"resourceclaims"}, "verbs": []any{"get"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"nodes"}, "verbs": []any{"get"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"pods"}, "verbs": []any{"list", "watch"}},
	}
	if diff := cmp.Diff(want, field(find(objs, "ClusterRole", "gpushare-dra-driver"), "rules")); diff != "" {
		t.Errorf("driver's rules (-want +got):\n%s", diff)
	}
	b := find(objs, "ClusterRoleBinding", "gpushare-dra-driver")
	if diff := cmp.Diff([]any{map[string]any{"kind": "ServiceAccount", "name": "gpushare-dra-driver", "namespace": "kube-system"}}, field(b, "subjects")); diff != "" {
		t.Errorf("binding's subjects (-want +got):\n%s", diff)
	}
	if got := field(find(objs, "DaemonSet", "gpushare-dra-driver"), "spec", "template", "spec", "serviceAccountName"); got != "gpushare-dra-driver" {
		t.Errorf("driver's serviceAccountName %v", got)
	}
}

// TestDRAConversionOptIn: with the driver and the webhook (second-scheduler
// topology, the default), the extender's webhook converts pods selecting the
// driver's node labels, all of them (--webhook-dra-node-selector, the
// device plugin's memory unit) and its account may create and get
// ResourceClaimTemplates and list and watch ResourceQuotas (the
// conversion's quota check), nothing more; draDriver.convertPods=false,
// the driver off or the extender topology (no webhook) render neither.
func TestDRAConversionOptIn(t *testing.T) {
	c := load(t)
	draRules := []any{
		map[string]any{"apiGroups": []any{"resource.k8s.io"}, "resources": []any{"resourceclaimtemplates"}, "verbs": []any{"create", "get"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"resourcequotas"}, "verbs": []any{"list", "watch"}},
	}
	extenderArgs := func(objs []map[string]any) []any {
		dep := find(objs, "Deployment", "gpushare-scheduler")
		if dep == nil {
			return nil
		}
		for _, ctr := range field(dep, "spec", "template", "spec", "containers").([]any) {
			if field(ctr, "name") == "extender" {
				return field(ctr, "args").([]any)
			}
		}
		return nil
	}
	// rules: how many of draRules the extender's ClusterRole has.
	rules := func(objs []map[string]any) int {
		n := 0
		for _, r := range field(find(objs, "ClusterRole", "gpushare-scheduler-extender"), "rules").([]any) {
			if slices.ContainsFunc(draRules, func(want any) bool { return cmp.Equal(r, want) }) {
				n++
			}
		}
		return n
	}
	converting := func(args []any) []string {
		var got []string
		for _, a := range args {
			if s := a.(string); strings.HasPrefix(s, "--webhook-dra-") {
				got = append(got, s)
			}
		}
		return got
	}

	// Helm merges the given labels with the default one: the driver runs
	// on nodes with all three, and the webhook converts pods asking all.
	on := objects(t, render(t, c, map[string]any{
		"draDriver":    map[string]any{"enabled": true, "nodeSelector": map[string]any{"zone/dra": "yes", "a.example/dra": "on"}},
		"devicePlugin": map[string]any{"memoryUnit": "MiB"},
	}))
	if diff := cmp.Diff([]string{"--webhook-dra-node-selector=a.example/dra=on,gpushare.io/device-mode=dra,zone/dra=yes", "--webhook-dra-memory-unit=MiB"}, converting(extenderArgs(on))); diff != "" {
		t.Errorf("extender's conversion flags (-want +got):\n%s", diff)
	}
	if n := rules(on); n != len(draRules) {
		t.Errorf("the extender's ClusterRole has %d of the conversion's rules %v, want all", n, draRules)
	}
	for name, values := range map[string]map[string]any{
		"driver off":        nil,
		"convertPods false": {"draDriver": map[string]any{"enabled": true, "convertPods": false}},
		"webhook off":       {"draDriver": map[string]any{"enabled": true}, "scheduler": map[string]any{"webhook": map[string]any{"enabled": false}}},
		"extender topology": {"draDriver": map[string]any{"enabled": true}, "topology": "extender"},
	} {
		objs := objects(t, render(t, c, values))
		if got := converting(extenderArgs(objs)); len(got) != 0 {
			t.Errorf("%s: conversion flags %v", name, got)
		}
		if n := rules(objs); n != 0 {
			t.Errorf("%s: the extender's ClusterRole has %d of the conversion's rules %v, want none", name, n, draRules)
		}
	}
}
