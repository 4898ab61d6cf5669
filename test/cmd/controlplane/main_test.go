package main

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/test/integration/framework"
)

// TestBuildFlags: -version defaults to the harness's version and takes
// only a version it builds; -kcm and -containerd only where the command
// has them; no arguments beside the flags.
func TestBuildFlags(t *testing.T) {
	for _, tc := range []struct {
		name        string
		args        []string
		extra       string // the command's bool flag: kcm, containerd or none
		wantVersion string
		wantKCM     bool // the extra flag's value
		wantErr     string
	}{
		{name: "defaults", extra: "kcm", wantVersion: framework.KubernetesVersion},
		{name: "oldest with kcm", args: []string{"-version", framework.KubernetesVersionOldest, "-kcm"}, extra: "kcm", wantVersion: framework.KubernetesVersionOldest, wantKCM: true},
		{name: "node oldest", args: []string{"-version=" + framework.KubernetesVersionOldest}, extra: "containerd", wantVersion: framework.KubernetesVersionOldest},
		{name: "node with containerd", args: []string{"-containerd"}, extra: "containerd", wantVersion: framework.KubernetesVersion, wantKCM: true},
		{name: "unbuilt version", args: []string{"-version", "v1.36.0"}, extra: "kcm", wantErr: `not "v1.36.0"`},
		{name: "no kcm on build-node", args: []string{"-kcm"}, extra: "containerd", wantErr: "-kcm"},
		{name: "no containerd on build", args: []string{"-containerd"}, extra: "kcm", wantErr: "-containerd"},
		{name: "no extra flag", args: []string{"-kcm"}, wantErr: "-kcm"},
		{name: "stray argument", args: []string{"v1.34.3"}, extra: "kcm", wantErr: "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version, kcm, err := buildFlags("build", tc.args, tc.extra)
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
	if _, _, err := buildFlags("build", []string{"-h"}, "kcm"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("buildFlags(-h) error %v, want flag.ErrHelp (exit 0)", err)
	}
}
