package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/pkg/simulator/trace"
	"github.com/gpushare/gpushare/test/util"
)

// TestMainKubernetesDump: one `kubectl get nodes,pods -o yaml` dump, named
// by both --nodes and --pods and without an extension (told from CSV by its
// content), replays and plots to a PNG file.
func TestMainKubernetesDump(t *testing.T) {
	dir := t.TempDir()
	dump := filepath.Join(dir, "cluster")
	pods := []any{util.MakeNode("a").Cards("T4", 16, 16).Obj(), util.MakeNode("b").Cards("T4", 16).Obj()}
	for i := range 6 {
		pods = append(pods, util.MakePod(fmt.Sprintf("p%d", i)).GPUMem(8).Obj())
	}
	if err := os.WriteFile(dump, []byte(util.KubeList(t, pods...)), 0o644); err != nil {
		t.Fatal(err)
	}
	plot := filepath.Join(dir, "out.PNG")
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), []string{"--nodes", dump, "--pods", dump, "--policy", "binpack", "--seeds", "1", "--format", "json", "--plot", plot}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	// The fields of --format json's objects that this test reads.
	var got []struct {
		FailedPods float64         `json:"failed_pods"`
		AllocAt    map[int]float64 `json:"alloc_at"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	// 48 GiB of cards, six 8 GiB pods: all fit (100% at 100% arrival);
	// two clones take arrival past 130% (64 GiB) and both fail.
	if len(got) != 1 || got[0].FailedPods != 2 || got[0].AllocAt[100] != 100 {
		t.Errorf("summary %+v, want binpack, 100%% allocated at 100%% arrival, the 2 clones failed", got)
	}
	f, err := os.Open(plot)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("--plot %s: %v", plot, err)
	}

	// A dump without Pods names the file.
	nodesOnly := filepath.Join(dir, "nodes.yaml")
	if err := os.WriteFile(nodesOnly, []byte(util.KubeList(t, pods[0])), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := trace.LoadTrace(nodesOnly, nodesOnly); err == nil || !strings.Contains(err.Error(), "nodes.yaml") || !strings.Contains(err.Error(), "no Pod objects") {
		t.Errorf("LoadTrace of a dump without pods: %v", err)
	}
}
