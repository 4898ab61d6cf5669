package version

import (
	"strings"
	"testing"
)

func TestChart(t *testing.T) {
	for _, tc := range []struct {
		version, want string
		wantErr       bool
	}{
		{version: "v0.1.0", want: "0.1.0"},
		{version: "v1.12.3-rc.1", want: "1.12.3-rc.1"},
		{version: "0.1.0", wantErr: true},   // no v: the image tags carry one
		{version: "a3be64b", wantErr: true}, // git describe of an untagged commit
		{version: "v0.1.0-3-ga3be64b-dirty", want: "0.1.0-3-ga3be64b-dirty"},
		{version: "v01.2.3", wantErr: true},
		{version: "", wantErr: true},
	} {
		got, err := Chart(tc.version)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("Chart(%q) = %q, %v; want %q, error %v", tc.version, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "git tag") {
			t.Errorf("Chart(%q): the error %q does not say how to fix it", tc.version, err)
		}
	}
}
