package plot

import (
	"bytes"
	"context"
	"image/png"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/pkg/simulator"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
)

// sliceSummaries replays pkg/simulator's slice of the default openb trace
// (every 20th node and pod) with every policy, seeds 1-3, CPU-only pods
// handled as cpuPods says.
func sliceSummaries(t *testing.T, cpuPods simulator.CPUPods) []simulator.Summary {
	t.Helper()
	tr, err := trace.LoadTrace("../testdata/openb-slice/nodes.csv", "../testdata/openb-slice/pods.csv")
	if err != nil {
		t.Fatal(err)
	}
	sums, err := simulator.RunAll(context.Background(), tr, &simulator.Config{Policies: simulator.DefaultPolicies, Seeds: []uint64{1, 2, 3},
		Inflate: simulator.DefaultInflate, CPUPods: cpuPods, Parallel: 2})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

func TestPlot(t *testing.T) {
	sums := sliceSummaries(t, simulator.CPUPodsPlace)
	var svg bytes.Buffer
	if err := WriteSVG(&svg, sums); err != nil {
		t.Fatal(err)
	}
	s := svg.String()
	if !strings.HasPrefix(s, "<svg ") || !strings.HasSuffix(s, "</svg>\n") || strings.Count(s, "<polyline") != len(sums) {
		t.Errorf("SVG: want one polyline per policy in an <svg> element:\n%s", s)
	}
	for _, p := range simulator.DefaultPolicies {
		if !strings.Contains(s, ">"+p+" ") {
			t.Errorf("SVG legend lacks %s", p)
		}
	}
	var pngBuf bytes.Buffer
	if err := WritePNG(&pngBuf, sums); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&pngBuf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 760 || b.Dy() != 460 {
		t.Errorf("PNG is %v", b)
	}
}
