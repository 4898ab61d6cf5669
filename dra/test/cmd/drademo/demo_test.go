package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpushare/gpushare/test/supervisor"
)

// TestDemo runs make dra-demo's program as a user would: up builds what is
// missing, starts the 1.37 cluster and reports; the report shows the
// claims of 4, 8 and 4 GiB on the one 16 GiB card, prepared by the driver
// with driver isolation, and the 8 GiB pod waiting; status reports the
// same again; down stops every process the demo started.
func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Kubernetes 1.37 control plane")
	}
	bin := filepath.Join(t.TempDir(), "gpushare-dra-demo")
	// -trimpath, as the DRA driver's image build compiles the same
	// k8s.io v0.37 packages: on a cold cache they compile once for both.
	if out, err := exec.Command("go", "build", "-trimpath", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the demo: %v\n%s", err, out)
	}
	dir := t.TempDir()
	run := func(cmd string) string {
		t.Helper()
		c := exec.Command(bin, cmd, "--dir", dir)
		var out bytes.Buffer
		c.Stdout, c.Stderr = &out, &out
		if err := c.Run(); err != nil {
			t.Fatalf("gpushare-dra-demo %s: %v\n%s", cmd, err, out.String())
		}
		return out.String()
	}
	t.Cleanup(func() { run("down") })

	for _, cmd := range []string{"up", "status"} {
		out := run(cmd)
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^dra-a-4gi\s+dra-node\s+dra-a-4gi-gpu-\w+\s+gpu-0\s+4Gi\s+\w{8}\s+.*GPUSHARE_ISOLATION=driver`),
			regexp.MustCompile(`(?m)^dra-b-8gi\s+dra-node\s+dra-b-8gi-gpu-\w+\s+gpu-0\s+8Gi\s+\w{8}\s+.*GPUSHARE_MEMORY_LIMIT_MIB=8192`),
			regexp.MustCompile(`(?m)^dra-c-4gi\s+dra-node\s+dra-c-4gi-gpu-\w+\s+gpu-0\s+4Gi\s+`),
			regexp.MustCompile(`(?m)^dra-d-8gi-waits\s+-\s+-\s+-\s+-\s+-\s+waits: \S`),
			regexp.MustCompile(`(?m)^KUBECONFIG=/\S+$`),
		} {
			if !want.MatchString(out) {
				t.Errorf("%s's report does not match %s:\n%s", cmd, want, out)
			}
		}
		if !strings.Contains(out, "dra-node") || !strings.Contains(out, "gpu-0") {
			t.Errorf("%s: no inspect table naming dra-node and gpu-0:\n%s", cmd, out)
		}
	}

	procs, err := supervisor.ReadProcesses(filepath.Join(dir, processesFile))
	if err != nil || len(procs) < 4 {
		t.Fatalf("processes file: %v, %d processes; want etcd, kube-apiserver, kube-scheduler, kube-controller-manager", err, len(procs))
	}
	out := run("down")
	if !strings.Contains(out, "DRA demo stopped") {
		t.Errorf("down said %q", out)
	}
	for _, p := range procs {
		if p.Alive() {
			t.Errorf("%s (pid %d) still runs after down", p.Name, p.PID)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, readyFile)); !os.IsNotExist(err) {
		t.Errorf("the ready file is still there after down: %v", err)
	}
}
