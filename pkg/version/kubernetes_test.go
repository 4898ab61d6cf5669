package version

import "testing"

func TestKubernetesMinor(t *testing.T) {
	for _, tc := range []struct {
		v       string
		want    int
		wantErr bool
	}{
		{v: "v1.37.2", want: 37},
		{v: "1.34", want: 34},
		{v: "v1.36.0-rc.1", want: 36},
		{v: "v1.35-alpha", want: 35},
		{v: "v2.1.0", wantErr: true},
		{v: "v1", wantErr: true},
		{v: "v1.x.0", wantErr: true},
		{v: "", wantErr: true},
	} {
		got, err := KubernetesMinor(tc.v)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("KubernetesMinor(%q) = %d, %v; want %d, error %v", tc.v, got, err, tc.want, tc.wantErr)
		}
	}
}
