package gpushare

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseInventoryIsolation(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		wantMode []Isolation
		wantErr  string
	}{
		{
			name:     "an inventory from before isolation reads as none",
			in:       `{"unit":"GiB","devices":[{"index":0,"uuid":"GPU-a","memory":16,"healthy":true}]}`,
			wantMode: []Isolation{IsolationNone},
		},
		{
			name: "each card its mode",
			in: `{"unit":"GiB","devices":[{"index":0,"memory":16,"healthy":true,"isolation":"driver"},` +
				`{"index":1,"memory":16,"healthy":true,"isolation":"mps"},{"index":2,"memory":16,"healthy":true,"isolation":"none"}]}`,
			wantMode: []Isolation{IsolationDriver, IsolationMPS, IsolationNone},
		},
		{
			name:    "unknown mode",
			in:      `{"unit":"GiB","devices":[{"index":0,"memory":16,"healthy":true,"isolation":"strict"}]}`,
			wantErr: `device 0: invalid gpushare annotation: isolation "strict", want driver, mps or none`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv, err := ParseInventory(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseInventory() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []Isolation
			for _, d := range inv.Devices {
				got = append(got, d.Mode())
			}
			if diff := cmp.Diff(tc.wantMode, got); diff != "" {
				t.Errorf("modes (-want +got):\n%s", diff)
			}
		})
	}
}
