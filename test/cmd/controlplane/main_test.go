package main

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/test/integration/framework"
)

// TestBuildFlags: -version defaults to the harness's version and takes
// only a version it builds; -kcm only where the command has it; no
// arguments beside the flags.
func TestBuildFlags(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		kcm         bool // the command has -kcm
		wantVersion string
		wantKCM     bool
		wantErr     string
	}{
		{name: "defaults", kcm: true, wantVersion: framework.KubernetesVersion},
		{name: "oldest with kcm", args: []string{"-version", framework.KubernetesVersionOldest, "-kcm"}, kcm: true, wantVersion: framework.KubernetesVersionOldest, wantKCM: true},
		{name: "node oldest", args: []string{"-version=" + framework.KubernetesVersionOldest}, wantVersion: framework.KubernetesVersionOldest},
		{name: "unbuilt version", args: []string{"-version", "v1.36.0"}, kcm: true, wantErr: `not "v1.36.0"`},
		{name: "no kcm on build-node", args: []string{"-kcm"}, wantErr: "-kcm"},
		{name: "stray argument", args: []string{"v1.34.3"}, kcm: true, wantErr: "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version, kcm, err := buildFlags("build", tc.args, tc.kcm)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("buildFlags(%q) error %v, want one with %q", tc.args, err, tc.wantErr)
				}
				return
			}
			if err != nil || version != tc.wantVersion || kcm != tc.wantKCM {
				t.Fatalf("buildFlags(%q) = %q, %t, %v; want %q, %t", tc.args, version, kcm, err, tc.wantVersion, tc.wantKCM)
			}
		})
	}
	if _, _, err := buildFlags("build", []string{"-h"}, true); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("buildFlags(-h) error %v, want flag.ErrHelp (exit 0)", err)
	}
}
