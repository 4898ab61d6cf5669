package extenders

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/gpushare/gpushare/pkg/build/image"
	"github.com/gpushare/gpushare/test/integration/framework"
)

// Build builds the extender binary into a temporary directory,
// as its image builds it (pkg/build/image's recipe: -trimpath, no cgo), so a
// cold make test compiles its dependencies once for both.
func Build(t testing.TB) string {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range image.Recipes() {
		if r.Name != "gpushare-scheduler-extender" {
			continue
		}
		bin := filepath.Join(t.TempDir(), r.Name)
		cmd := exec.Command("go", r.GoArgs("test", bin)...)
		cmd.Dir, cmd.Env = r.Dir(root), append(os.Environ(), r.GoEnv()...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building the extender: %v\n%s", err, out)
		}
		return bin
	}
	t.Fatal("pkg/build/image has no recipe gpushare-scheduler-extender")
	return ""
}

// NoopSchedulerConfig calls an extender for filter and prioritize only
// (the scheduler binds), with the shipped configuration's client limits.
const NoopSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: set-by-framework, qps: 500, burst: 1000}
extenders:
- urlPrefix: set-by-framework
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 10
  nodeCacheCapable: true
  managedResources: [{name: aliyun.com/gpu-mem, ignoredByScheduler: false}]
`

// Noop serves filter (every node passes) and prioritize (every
// node scores 5) without looking at anything, and returns its URL prefix.
// record, when not nil, gets the node names of every filter call.
func Noop(t testing.TB, record func(nodeNames []string)) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/noop/filter", func(w http.ResponseWriter, r *http.Request) {
		var a extenderv1.ExtenderArgs
		_ = json.NewDecoder(r.Body).Decode(&a)
		if record != nil && a.NodeNames != nil {
			record(*a.NodeNames)
		}
		_ = json.NewEncoder(w).Encode(extenderv1.ExtenderFilterResult{NodeNames: a.NodeNames, FailedNodes: map[string]string{}})
	})
	mux.HandleFunc("/noop/prioritize", func(w http.ResponseWriter, r *http.Request) {
		var a extenderv1.ExtenderArgs
		_ = json.NewDecoder(r.Body).Decode(&a)
		out := extenderv1.HostPriorityList{}
		if a.NodeNames != nil {
			for _, n := range *a.NodeNames {
				out = append(out, extenderv1.HostPriority{Host: n, Score: 5})
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL + "/noop"
}
