package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpushare/gpushare/pkg/simulator"
)

// The openb slice of pkg/simulator's tests (every 20th node and pod of
// the default trace).
const (
	sliceNodes = "../testdata/openb-slice/nodes.csv"
	slicePods  = "../testdata/openb-slice/pods.csv"
)

func TestParseSeeds(t *testing.T) {
	tests := []struct {
		in      string
		want    []uint64
		wantErr string
	}{
		{in: "42-51", want: []uint64{42, 43, 44, 45, 46, 47, 48, 49, 50, 51}},
		{in: "7", want: []uint64{7}},
		{in: "1,5, 9", want: []uint64{1, 5, 9}},
		{in: "1-2,8", want: []uint64{1, 2, 8}},
		{in: "51-42", wantErr: `--seeds "51-42": the range 51-42 runs backwards; want e.g. 42-51`},
		{in: "x", wantErr: `--seeds "x": "x" is not a seed; want e.g. 42-51, 1,5,9 or 7`},
		{in: "1-y", wantErr: `--seeds "1-y": "1-y" is not a range; want e.g. 42-51`},
		{in: "3,3", wantErr: `--seeds "3,3": seed 3 appears twice`},
		{in: "0-5000", wantErr: `--seeds "0-5000": 5001 seeds; at most 1000`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSeeds(tc.in)
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if diff := cmp.Diff(tc.wantErr, gotErr); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.want, got); tc.wantErr == "" && diff != "" {
				t.Errorf("seeds (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMainCommand(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("sn,cpu_milli,memory_mib,gpu,model\nn1,96000,x,8,G2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStdout string // regexp
		wantStderr string // regexp
	}{
		{name: "help", args: []string{"--help"}, wantCode: 0, wantStdout: `(?s)^Usage: gpushare-simulate --nodes FILE --pods FILE.*-seeds string`},
		{name: "no inputs", args: nil, wantCode: 2, wantStderr: `^simulate: --nodes and --pods are required\n`},
		{name: "unknown flag", args: []string{"--nodes", "a", "--pods", "b", "--colour"}, wantCode: 2, wantStderr: `flag provided but not defined: -colour`},
		{name: "unknown policy", args: []string{"--nodes", sliceNodes, "--pods", slicePods, "--policy", "fgd,worstfit"}, wantCode: 2,
			wantStderr: `^simulate: --policy: unknown policy "worstfit"; want one of bestfit, binpack, fgd, fragaware, random, spread\n`},
		{name: "bad format", args: []string{"--nodes", sliceNodes, "--pods", slicePods, "--format", "xml"}, wantCode: 2, wantStderr: `--format "xml": want table, json or csv`},
		{name: "bad plot name", args: []string{"--nodes", sliceNodes, "--pods", slicePods, "--plot", "out.pdf"}, wantCode: 2, wantStderr: `--plot out.pdf: the file name must end in .svg or .png`},
		{name: "bad percentage", args: []string{"--nodes", sliceNodes, "--pods", slicePods, "--percentage-of-nodes-to-score", "101"}, wantCode: 2,
			wantStderr: `--percentage-of-nodes-to-score 101: want 0 \(kube-scheduler's adaptive default\) to 100`},
		{name: "missing file", args: []string{"--nodes", filepath.Join(dir, "none.csv"), "--pods", slicePods}, wantCode: 1, wantStderr: `^simulate: open .*none.csv: no such file or directory\n$`},
		{name: "bad file names line and column", args: []string{"--nodes", bad, "--pods", slicePods}, wantCode: 1, wantStderr: `bad.csv:2:10: memory_mib is "x"; want a whole number\n$`},
		{name: "json", args: []string{"--nodes", sliceNodes, "--pods", slicePods, "--policy", "binpack,fragaware", "--seeds", "1-2", "--format", "json"}, wantCode: 0,
			wantStdout: `^\[\{"policy":"binpack","seeds":\[1,2\],"cpu_pods":"place","topology":"extender","alloc_at":\{"90":[0-9.]+,"100":[0-9.]+,"110":[0-9.]+,"120":[0-9.]+,"130":[0-9.]+\},"failed_pods":[0-9.]+,"retried_pods":0,"percentage_of_nodes_to_score":0,"nodes":61,"nodes_to_find":61,"seconds":[0-9.]+\},\{"policy":"fragaware",.*\}\]\n$`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Main(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.wantCode {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.wantCode, stderr.String())
			}
			if tc.wantStdout != "" && !regexp.MustCompile(tc.wantStdout).MatchString(stdout.String()) {
				t.Errorf("stdout does not match %q:\n%s", tc.wantStdout, stdout.String())
			}
			if tc.wantStderr != "" && !regexp.MustCompile(tc.wantStderr).MatchString(stderr.String()) {
				t.Errorf("stderr does not match %q:\n%s", tc.wantStderr, stderr.String())
			}
		})
	}
}

// TestMainJSONIsOneArray: the json output decodes as one array of objects.
func TestMainJSONIsOneArray(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--nodes", sliceNodes, "--pods", slicePods, "--seeds", "1", "--format", "json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var got []map[string]any
	dec := json.NewDecoder(&stdout)
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	if dec.More() {
		t.Error("more than one JSON value on stdout")
	}
	if len(got) != len(simulator.DefaultPolicies) {
		t.Errorf("%d objects, want one per policy (%d)", len(got), len(simulator.DefaultPolicies))
	}
}
