package deviceplugin

import (
	"io"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/isolation"
)

// TestParseMPSDaemonsFlags: the mps-daemons command's flags, as the
// chart's mps-daemons DaemonSet passes them.
func TestParseMPSDaemonsFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    isolation.MPSDaemonsConfig
		wantErr string
	}{
		{name: "defaults", want: isolation.MPSDaemonsConfig{Control: isolation.DefaultMPSControl, Root: isolation.DefaultMPSRoot, Poll: isolation.DefaultMPSPoll}},
		{name: "set", args: []string{"--mps-root=/run/mps", "--mps-control=/usr/bin/nvidia-cuda-mps-control", "--poll=1s"},
			want: isolation.MPSDaemonsConfig{Control: "/usr/bin/nvidia-cuda-mps-control", Root: "/run/mps", Poll: time.Second}},
		{name: "relative root", args: []string{"--mps-root=run/mps"}, wantErr: `--mps-root "run/mps" must be absolute`},
		// 38 bytes: a pipe directory of 84, the longest seen to work.
		{name: "longest root", args: []string{"--mps-root=/var/lib/gpushare/mps-daemons/pipes-xx"},
			want: isolation.MPSDaemonsConfig{Control: isolation.DefaultMPSControl, Root: "/var/lib/gpushare/mps-daemons/pipes-xx", Poll: isolation.DefaultMPSPoll}},
		{name: "root too long for MPS's sockets", args: []string{"--mps-root=/var/lib/gpushare/mps-daemons/pipes-xxx"},
			wantErr: `--mps-root "/var/lib/gpushare/mps-daemons/pipes-xxx" is too long: a card's MPS pipe directory under it would be 85 bytes, ` +
				`and the MPS control daemon exits at start with one over 84 (its socket paths have a 108-byte limit); use at most 38 bytes, e.g. /run/gpushare/mps`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMPSDaemonsFlags(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got, cmp.Comparer(func(a, b func(string, error)) bool { return a == nil && b == nil })); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}
