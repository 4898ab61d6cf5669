package chart

import (
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
