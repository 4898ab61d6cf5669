package repo

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeGo stands in for the go command in make test: it records each call
// ("PID|DIR|ARGS") in $FAKEGO_LOG, answers go list with one package, makes
// every go build take $FAKEGO_BUILD_SECONDS, and fails the root module's
// go test when $FAKEGO_FAIL is set; go run takes $FAKEGO_RUN_SECONDS, then
// records "PID|DIR|ended ARGS". Another module's go test takes
// $FAKEGO_TEST_SECONDS, then records "PID|DIR|ended ARGS", prints a line
// naming its module and fails when that module is $FAKEGO_FAIL_MODULE.
const fakeGo = `#!/bin/bash
echo "$$|$PWD|$*" >> "$FAKEGO_LOG"
case "$1" in
list) echo example.com/x ;;
build) sleep "${FAKEGO_BUILD_SECONDS:-0}" ;;
run)
	sleep "${FAKEGO_RUN_SECONDS:-0}"
	echo "$$|$PWD|ended $*" >> "$FAKEGO_LOG" ;;
test)
	[ -n "$FAKEGO_FAIL" ] && [ "$PWD" = "$FAKEGO_ROOT" ] && { sleep 1; exit 3; }
	if [ "$PWD" != "$FAKEGO_ROOT" ]; then
		sleep "${FAKEGO_TEST_SECONDS:-0}"
		echo "$$|$PWD|ended $*" >> "$FAKEGO_LOG"
		echo "fake tests of ${PWD#"$FAKEGO_ROOT"/}"
		[ "$PWD" = "$FAKEGO_ROOT/$FAKEGO_FAIL_MODULE" ] && exit 5
	fi ;;
esac
exit 0
`

type goCall struct {
	pid       int
	dir, args string
}

// runMakeTest runs make test with fakeGo and returns its error and the
// calls, in order.
func runMakeTest(t *testing.T, env ...string) ([]goCall, error) {
	calls, _, err := runMakeTestOutput(t, env...)
	return calls, err
}

// runMakeTestOutput is runMakeTest that also returns make's output.
func runMakeTestOutput(t *testing.T, env ...string) ([]goCall, string, error) {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goBin, log := filepath.Join(dir, "go"), filepath.Join(dir, "calls")
	if err := os.WriteFile(goBin, []byte(fakeGo), 0o755); err != nil { //nolint:gosec // an executable stand-in
		t.Fatal(err)
	}
	cmd := exec.Command("make", "--no-print-directory", "test", "GO="+goBin, "WARM_CACHE_LOG="+filepath.Join(dir, "warm-cache.log"))
	cmd.Dir = root
	cmd.Env = append(append(os.Environ(), "FAKEGO_LOG="+log, "FAKEGO_ROOT="+root), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	runErr := cmd.Run()
	t.Logf("make test:\n%s", out.String())
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var calls []goCall
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.SplitN(line, "|", 3)
		pid, _ := strconv.Atoi(f[0])
		calls = append(calls, goCall{pid: pid, dir: strings.TrimPrefix(strings.TrimPrefix(f[1], root), "/"), args: f[2]})
	}
	return calls, out.String(), runErr
}

// TestMakeTestWarmsTheCache: make test's warm-up compiles the later
// modules' dependencies beside the root module's tests, and test/kubelet's
// tests start only once it has ended.
func TestMakeTestWarmsTheCache(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	calls, err := runMakeTest(t, "FAKEGO_BUILD_SECONDS=1")
	if err != nil {
		t.Fatalf("make test: %v", err)
	}
	index := func(dir, prefix string) int {
		return slices.IndexFunc(calls, func(c goCall) bool { return c.dir == dir && strings.HasPrefix(c.args, prefix) })
	}
	for _, dir := range []string{"test/kubelet", "test/chart", "dra"} {
		if index(dir, "build -race example.com/x") < 0 {
			t.Errorf("the warm-up did not build %s's dependencies with -race; calls: %+v", dir, calls)
		}
	}
	lastWarm := 0
	for i, c := range calls {
		if strings.HasPrefix(c.args, "build -race") {
			lastWarm = i
		}
	}
	if k := index("test/kubelet", "test -race"); k < lastWarm {
		t.Errorf("test/kubelet's tests (call %d) started before the warm-up ended (its last build is call %d)", k, lastWarm)
	}
}

// TestMakeTestWarmsBesideTheControlPlaneBuild: the warm-up starts before
// make test builds the control plane (here 3 s), not after it, and the
// root module's tests start once that build has ended.
func TestMakeTestWarmsBesideTheControlPlaneBuild(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	calls, err := runMakeTest(t, "FAKEGO_RUN_SECONDS=3")
	if err != nil {
		t.Fatalf("make test: %v", err)
	}
	index := func(f func(goCall) bool) int { return slices.IndexFunc(calls, f) }
	cpEnd := index(func(c goCall) bool {
		return c.dir == "" && c.args == "ended run -trimpath ./test/cmd/controlplane build"
	})
	firstWarm := index(func(c goCall) bool { return c.dir == "test/kubelet" && strings.HasPrefix(c.args, "build -race") })
	rootTests := index(func(c goCall) bool { return c.dir == "" && strings.HasPrefix(c.args, "test -race") })
	switch {
	case cpEnd < 0 || firstWarm < 0 || rootTests < 0:
		t.Fatalf("missing calls (control plane build ended %d, first warm-up build %d, root tests %d): %+v", cpEnd, firstWarm, rootTests, calls)
	case firstWarm > cpEnd:
		t.Errorf("the warm-up's first build (call %d) started after the control plane's build ended (call %d)", firstWarm, cpEnd)
	case rootTests < cpEnd:
		t.Errorf("the root module's tests (call %d) started before the control plane's build ended (call %d)", rootTests, cpEnd)
	}
}

// TestMakeTestStopsTheWarmUp: when the root module's tests fail, make test
// fails and stops the warm-up rather than leaving it compiling.
func TestMakeTestStopsTheWarmUp(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	start := time.Now()
	calls, err := runMakeTest(t, "FAKEGO_FAIL=1", "FAKEGO_BUILD_SECONDS=60")
	if err == nil {
		t.Fatal("make test passed with the root module's tests failing")
	}
	if took := time.Since(start); took > 45*time.Second {
		t.Errorf("make test took %s: it waited for the warm-up's 60 s build", took)
	}
	i := slices.IndexFunc(calls, func(c goCall) bool { return strings.HasPrefix(c.args, "build -race") })
	if i < 0 {
		t.Fatalf("the warm-up never started a build; calls: %+v", calls)
	}
	deadline := time.Now().Add(5 * time.Second)
	for syscall.Kill(calls[i].pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("the warm-up's build (pid %d) still runs after make test failed", calls[i].pid)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// laterModules are the modules whose tests make test runs after the root
// module's, together.
var laterModules = []string{"test/kubelet", "test/chart", "dra"}

// TestMakeTestRunsTheLaterModulesTogether: the later modules' go test runs
// start before any of them ends (each takes 3 s), and each module's output
// is printed.
func TestMakeTestRunsTheLaterModulesTogether(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	calls, out, err := runMakeTestOutput(t, "FAKEGO_TEST_SECONDS=3")
	if err != nil {
		t.Fatalf("make test: %v", err)
	}
	firstEnd := slices.IndexFunc(calls, func(c goCall) bool { return strings.HasPrefix(c.args, "ended test") })
	if firstEnd < 0 {
		t.Fatalf("no later module's tests ran; calls: %+v", calls)
	}
	for _, dir := range laterModules {
		i := slices.IndexFunc(calls, func(c goCall) bool { return c.dir == dir && strings.HasPrefix(c.args, "test -race") })
		switch {
		case i < 0:
			t.Errorf("%s's tests never ran; calls: %+v", dir, calls)
		case i > firstEnd:
			t.Errorf("%s's tests started (call %d) after another module's ended (call %d)", dir, i, firstEnd)
		}
		if !strings.Contains(out, "fake tests of "+dir+"\n") {
			t.Errorf("make test's output lacks %s's test output", dir)
		}
	}
}

// TestMakeTestFailsWithALaterModule: one later module failing fails make
// test, after the others have run to the end and their output is printed.
func TestMakeTestFailsWithALaterModule(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	calls, out, err := runMakeTestOutput(t, "FAKEGO_FAIL_MODULE=test/chart", "FAKEGO_TEST_SECONDS=1")
	if err == nil {
		t.Fatal("make test passed with test/chart's tests failing")
	}
	for _, dir := range laterModules {
		if !slices.ContainsFunc(calls, func(c goCall) bool { return c.dir == dir && strings.HasPrefix(c.args, "ended test") }) {
			t.Errorf("%s's tests did not run to their end", dir)
		}
		if !strings.Contains(out, "fake tests of "+dir+"\n") {
			t.Errorf("make test's output lacks %s's test output", dir)
		}
	}
	if !strings.Contains(out, "--- cd test/chart && ") || !strings.Contains(out, ": exit 5 after ") {
		t.Errorf("make test's output does not say test/chart's go test exited 5")
	}
}

// TestMakeTestStartsModulesBesideTheNodeBuild: as root the warm-up's last
// step builds the real node's binaries and containerd (go run ...
// build-node -containerd, here 4 s); the later modules' tests start before
// it ends, once the warm-up's dependency builds are done, and make test
// waits for it before exiting.
func TestMakeTestStartsModulesBesideTheNodeBuild(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	if os.Geteuid() != 0 {
		t.Skip("the warm-up builds the real node's binaries only as root")
	}
	calls, err := runMakeTest(t, "FAKEGO_RUN_SECONDS=4")
	if err != nil {
		t.Fatalf("make test: %v", err)
	}
	index := func(f func(goCall) bool) int { return slices.IndexFunc(calls, f) }
	nodeEnd := index(func(c goCall) bool {
		return strings.HasPrefix(c.args, "ended run") && strings.HasSuffix(c.args, "build-node -containerd")
	})
	lastDeps := -1
	for i, c := range calls {
		if strings.HasPrefix(c.args, "build -race") {
			lastDeps = i
		}
	}
	if nodeEnd < 0 {
		t.Fatalf("the warm-up's build-node never ended; calls: %+v", calls)
	}
	for _, dir := range laterModules {
		i := index(func(c goCall) bool { return c.dir == dir && strings.HasPrefix(c.args, "test -race") })
		if i < lastDeps || i > nodeEnd {
			t.Errorf("%s's tests started at call %d; want after the warm-up's last dependency build (%d) and before build-node ended (%d)", dir, i, lastDeps, nodeEnd)
		}
	}
}
