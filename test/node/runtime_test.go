package node

import (
	"strings"
	"testing"
)

// TestRuntimeFits: kubelet 1.36 and later run only on containerd 2;
// earlier ones on either; a version that is none is refused.
func TestRuntimeFits(t *testing.T) {
	for _, tc := range []struct {
		runtime Runtime
		version string
		wantErr string
	}{
		{Containerd16, "v1.34.3", ""},
		{Containerd2, "v1.34.3", ""},
		{Containerd16, "v1.35.0", ""},
		{Containerd16, "v1.36.1", "needs containerd 2"},
		{Containerd16, "v1.37.2", "needs containerd 2"},
		{Containerd2, "v1.37.2", ""},
		{Containerd2, "latest", "want v1.MINOR[.PATCH]"},
	} {
		err := runtimeFits(tc.runtime, tc.version)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("runtimeFits(%s, %s) = %v, want nil", tc.runtime, tc.version, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("runtimeFits(%s, %s) = %v, want an error with %q", tc.runtime, tc.version, err, tc.wantErr)
		}
	}
}

// TestDefaultRuntime: containerd 2 from kubelet 1.36, containerd 1.6
// before; every default fits its kubelet.
func TestDefaultRuntime(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    Runtime
		wantErr bool
	}{
		{"v1.34.3", Containerd16, false},
		{"v1.35.0", Containerd16, false},
		{"v1.36.0", Containerd2, false},
		{"v1.37.2", Containerd2, false},
		{"latest", "", true},
	} {
		got, err := DefaultRuntime(tc.version)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("DefaultRuntime(%s) = %q, %v; want %q, error %t", tc.version, got, err, tc.want, tc.wantErr)
		}
		if err == nil {
			if err := runtimeFits(got, tc.version); err != nil {
				t.Errorf("DefaultRuntime(%s) = %s, which does not fit: %v", tc.version, got, err)
			}
		}
	}
}
