package chart

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDevicePluginMPSHost: the device plugin's DaemonSet gives mps mode
// what the plugin checks at startup: the MPS binaries (the NVIDIA
// runtime's compute capability), <mpsRoot>/shm at /dev/shm, and
// CAP_SYS_ADMIN only when the operator lets the plugin set compute modes.
func TestDevicePluginMPSHost(t *testing.T) {
	c := load(t)
	tests := []struct {
		name     string
		values   map[string]any
		shm      string
		sysAdmin bool
	}{
		{name: "defaults", values: nil, shm: "/run/gpushare/mps/shm"},
		{name: "another root", values: map[string]any{"devicePlugin": map[string]any{"mpsRoot": "/run/mps"}}, shm: "/run/mps/shm"},
		{name: "set compute mode", values: map[string]any{"devicePlugin": map[string]any{"mpsSetComputeMode": true}},
			shm: "/run/gpushare/mps/shm", sysAdmin: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ds := find(objects(t, render(t, c, tc.values)), "DaemonSet", "gpushare-device-plugin")
			if ds == nil {
				t.Fatal("no DaemonSet gpushare-device-plugin")
			}
			pod := field(ds, "spec", "template", "spec")
			ctr := field(pod, "containers").([]any)[0]
			env := map[string]any{}
			for _, e := range field(ctr, "env").([]any) {
				env[field(e, "name").(string)] = field(e, "value")
			}
			if got := env["NVIDIA_DRIVER_CAPABILITIES"]; got != "compute,utility" {
				t.Errorf("NVIDIA_DRIVER_CAPABILITIES = %v, want compute,utility (compute mounts nvidia-cuda-mps-control)", got)
			}
			mountedAt := ""
			for _, m := range field(ctr, "volumeMounts").([]any) {
				if field(m, "name") == "mps-shm" {
					mountedAt, _ = field(m, "mountPath").(string)
				}
			}
			hostPath := ""
			for _, v := range field(pod, "volumes").([]any) {
				if field(v, "name") == "mps-shm" {
					hostPath, _ = field(v, "hostPath", "path").(string)
				}
			}
			if diff := cmp.Diff([]string{tc.shm, "/dev/shm"}, []string{hostPath, mountedAt}); diff != "" {
				t.Errorf("mps-shm volume (host path, mount path) (-want +got):\n%s", diff)
			}
			added, _ := field(ctr, "securityContext", "capabilities", "add").([]any)
			if got := len(added) == 1 && added[0] == "SYS_ADMIN"; got != tc.sysAdmin || !tc.sysAdmin && len(added) > 0 {
				t.Errorf("capabilities added %v, want SYS_ADMIN: %v", added, tc.sysAdmin)
			}
		})
	}
}

// TestMPSDaemonsDaemonSet: mps mode's daemons get a DaemonSet of their own
// when the plugin may choose mps (isolation auto or mps), and the plugin
// is told so (--mps-daemons=external); it updates OnDelete (an upgrade
// does not stop running MPS clients), has no service-account token, adds
// only SETUID and SETGID (the control daemon starts each server as its
// client's user), and its own memory limit.
func TestMPSDaemonsDaemonSet(t *testing.T) {
	c := load(t)
	tests := []struct {
		isolation string
		want      bool
	}{
		{isolation: "auto", want: true},
		{isolation: "mps", want: true},
		{isolation: "driver", want: false},
		{isolation: "none", want: false},
	}
	for _, tc := range tests {
		t.Run(tc.isolation, func(t *testing.T) {
			objs := objects(t, render(t, c, map[string]any{"devicePlugin": map[string]any{"isolation": tc.isolation}}))
			plugin := find(objs, "DaemonSet", "gpushare-device-plugin")
			external := false
			for _, a := range field(field(plugin, "spec", "template", "spec", "containers").([]any)[0], "args").([]any) {
				external = external || a == "--mps-daemons=external"
			}
			ds := find(objs, "DaemonSet", "gpushare-mps-daemons")
			if diff := cmp.Diff([]bool{tc.want, tc.want}, []bool{ds != nil, external}); diff != "" {
				t.Fatalf("(MPS daemons' DaemonSet rendered, plugin's --mps-daemons=external) (-want +got):\n%s", diff)
			}
			if ds == nil {
				return
			}
			pod := field(ds, "spec", "template", "spec")
			ctr := field(pod, "containers").([]any)[0]
			got := map[string]any{
				"updateStrategy": field(ds, "spec", "updateStrategy", "type"),
				"token":          field(pod, "automountServiceAccountToken"),
				"drop":           field(ctr, "securityContext", "capabilities", "drop"),
				"add":            field(ctr, "securityContext", "capabilities", "add"),
				"escalation":     field(ctr, "securityContext", "allowPrivilegeEscalation"),
				"memoryLimit":    field(ctr, "resources", "limits", "memory"),
				"command":        field(ctr, "args").([]any)[0],
			}
			want := map[string]any{
				"updateStrategy": "OnDelete", "token": false, "drop": []any{"ALL"}, "add": []any{"SETUID", "SETGID"},
				"escalation": false, "memoryLimit": "1Gi", "command": "mps-daemons",
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("MPS daemons' DaemonSet (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDevicePluginRuntimeCDI: devicePlugin.runtimeCDI becomes the plugin's
// --runtime-cdi, whether --set gives it as the string or as YAML's
// boolean, and the schema refuses anything else.
func TestDevicePluginRuntimeCDI(t *testing.T) {
	c := load(t)
	tests := []struct {
		name  string
		value any // nil: the default
		want  string
	}{
		{name: "default", want: "--runtime-cdi=auto"},
		{name: "the string true", value: "true", want: "--runtime-cdi=true"},
		{name: "the boolean true (--set)", value: true, want: "--runtime-cdi=true"},
		{name: "the boolean false", value: false, want: "--runtime-cdi=false"},
		{name: "not a choice", value: "yes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var values map[string]any
			if tc.value != nil {
				values = map[string]any{"devicePlugin": map[string]any{"runtimeCDI": tc.value}}
			}
			r, err := Render(c, values, nil)
			if tc.want == "" {
				if err == nil {
					t.Errorf("runtimeCDI %v rendered; want the schema's refusal", tc.value)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ds := find(objects(t, r), "DaemonSet", "gpushare-device-plugin")
			var got []string
			for _, a := range field(field(ds, "spec", "template", "spec", "containers").([]any)[0], "args").([]any) {
				if s, _ := a.(string); strings.HasPrefix(s, "--runtime-cdi") {
					got = append(got, s)
				}
			}
			if diff := cmp.Diff([]string{tc.want}, got); diff != "" {
				t.Errorf("the plugin's --runtime-cdi (-want +got):\n%s", diff)
			}
		})
	}
}
