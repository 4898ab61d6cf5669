package inspect

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// failing returns an Env whose API answers verb on resource with err.
func failing(verb, resource string, err error) Env {
	client := fake.NewClientset(nodeA())
	client.PrependReactor(verb, resource, func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, err
	})
	return Env{NewClient: func(genericclioptions.RESTClientGetter) (kubernetes.Interface, error) { return client, nil }}
}

// TestErrors checks the exit status and the whole of stderr of each failure.
func TestErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing-kubeconfig")
	extender := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/gpushare-scheduler/inspect/ghost":
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"error":"node \"ghost\" is not known to the extender"}`))
		case "/broken/gpushare-scheduler/inspect":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "/garbled/gpushare-scheduler/inspect":
			_, _ = w.Write([]byte(`{"nodes":`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer extender.Close()
	point := "point at a cluster with --kubeconfig PATH or $KUBECONFIG (and --context NAME), or read a running extender with --from-extender URL"
	tests := []struct {
		name string
		env  Env
		// setenv: environment for the test (not parallel then).
		setenv     map[string]string
		args       []string
		wantStderr string
	}{
		{
			name:       "kubeconfig flag names a missing file",
			args:       []string{"--kubeconfig", missing},
			wantStderr: `error: kubeconfig "` + missing + `": file does not exist; ` + point + "\n",
		},
		{
			name:       "no kubeconfig anywhere, not in a pod",
			setenv:     map[string]string{"KUBECONFIG": missing, "KUBERNETES_SERVICE_HOST": "", "KUBERNETES_SERVICE_PORT": ""},
			wantStderr: "error: no cluster to talk to: no kubeconfig ($KUBECONFIG (" + missing + ") names no existing file) and not running in a pod; " + point + "\n",
		},
		{
			name:       "unknown node",
			env:        fakeEnv(nodeA()),
			args:       []string{"ghost"},
			wantStderr: `error: node "ghost" not found` + "\n",
		},
		{
			name:       "unknown node from the extender",
			args:       []string{"ghost", "--from-extender", extender.URL},
			wantStderr: `error: node "ghost" not found` + "\n",
		},
		{
			name:       "API error listing nodes",
			env:        failing("list", "nodes", apierrors.NewInternalError(errors.New("etcd is down"))),
			wantStderr: "error: listing nodes: Internal error occurred: etcd is down\n",
		},
		{
			name:       "API error getting a node",
			env:        failing("get", "nodes", apierrors.NewServiceUnavailable("apiserver is shutting down")),
			args:       []string{"gpu-a"},
			wantStderr: `error: getting node "gpu-a": apiserver is shutting down` + "\n",
		},
		{
			name: "not allowed to list pods",
			env:  failing("list", "pods", apierrors.NewForbidden(corev1.Resource("pods"), "", errors.New(`User "dev" cannot list resource "pods" at the cluster scope`))),
			wantStderr: `error: listing pods in all namespaces: pods is forbidden: User "dev" cannot list resource "pods" at the cluster scope` +
				" (the plugin needs get and list on nodes, and list on pods in all namespaces; ask for them or use --from-extender URL)\n",
		},
		{
			name: "cluster unreachable",
			env:  failing("list", "nodes", errors.New(`Get "https://10.0.0.1:6443/api/v1/nodes": dial tcp 10.0.0.1:6443: connect: connection refused`)),
			wantStderr: `error: listing nodes: Get "https://10.0.0.1:6443/api/v1/nodes": dial tcp 10.0.0.1:6443: connect: connection refused` +
				" (is the cluster reachable? check --kubeconfig and --context, or read the extender with --from-extender URL)\n",
		},
		{
			name:       "extender answers 500",
			args:       []string{"--from-extender", extender.URL + "/broken"},
			wantStderr: "error: the extender at " + extender.URL + "/broken/gpushare-scheduler/inspect answered 500 Internal Server Error: boom (is the URL a gpushare extender?)\n",
		},
		{
			name:       "extender answers garbage",
			args:       []string{"--from-extender", extender.URL + "/garbled/"},
			wantStderr: "error: decoding the extender's answer from " + extender.URL + "/garbled/gpushare-scheduler/inspect: unexpected end of JSON input\n",
		},
		{
			name:       "extender URL without a scheme",
			args:       []string{"--from-extender", "localhost:39999"},
			wantStderr: `error: --from-extender "localhost:39999": want an http:// or https:// URL, e.g. http://gpushare-scheduler-extender.kube-system:39999` + "\n",
		},
		{
			name:       "selector with the extender",
			args:       []string{"-l", "pool=a", "--from-extender", extender.URL},
			wantStderr: `error: --selector "pool=a" needs node labels, which the extender does not report; omit --from-extender to read the API` + "\n",
		},
		{
			name:       "node and selector",
			env:        fakeEnv(),
			args:       []string{"gpu-a", "-l", "pool=a"},
			wantStderr: `error: both a node name ("gpu-a") and --selector "pool=a" given; pass one of them` + "\n",
		},
		{
			name:       "unknown output",
			env:        fakeEnv(),
			args:       []string{"-o", "xml"},
			wantStderr: `error: unknown output format "xml"; want one of wide, json, yaml (or none for the table)` + "\n",
		},
		{
			name:       "two nodes",
			env:        fakeEnv(),
			args:       []string{"a", "b"},
			wantStderr: "error: accepts at most 1 arg(s), received 2\n",
		},
		{
			name:       "unknown flag",
			env:        fakeEnv(),
			args:       []string{"--nodes"},
			wantStderr: "error: unknown flag: --nodes\nSee 'kubectl inspect gpushare --help' for usage.\n",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.setenv {
				t.Setenv(k, v)
			}
			code, stdout, stderr := run(t, tc.env, tc.args...)
			if code != 1 {
				t.Errorf("exit status %d, want 1", code)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if diff := cmp.Diff(tc.wantStderr, stderr); diff != "" {
				t.Errorf("stderr (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHelp checks that --help names every flag the command reads.
func TestHelp(t *testing.T) {
	code, stdout, stderr := run(t, fakeEnv(), "--help")
	if code != 0 || stderr != "" {
		t.Fatalf("exit status %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"kubectl inspect gpushare [NODE] [flags]",
		"-d, --details", "-o, --output", "-l, --selector", "-A, --all-namespaces", "--from-extender",
		"-n, --namespace", "--kubeconfig", "--context", "-v, --v",
		"kubectl inspect gpushare -d gpu-node-1",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("--help lacks %q:\n%s", want, stdout)
		}
	}
}

func TestBar(t *testing.T) {
	tests := []struct {
		name        string
		used, total int64
		want        string
	}{
		{name: "empty", used: 0, total: 16, want: "[----------]"},
		{name: "half", used: 8, total: 16, want: "[#####-----]"},
		{name: "a little shows", used: 1, total: 80, want: "[#---------]"},
		{name: "almost full is not full", used: 15, total: 16, want: "[#########-]"},
		{name: "full", used: 16, total: 16, want: "[##########]"},
		{name: "over", used: 20, total: 16, want: "[##########]"},
		{name: "no total", used: 0, total: 0, want: "[----------]"},
		{name: "rounds to nearest", used: 3, total: 16, want: "[##--------]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, bar(tc.used, tc.total)); diff != "" {
				t.Errorf("bar(%d, %d) (-want +got):\n%s", tc.used, tc.total, diff)
			}
		})
	}
}

func TestParseExtenderURL(t *testing.T) {
	tests := []struct {
		name, raw, node, want string
	}{
		{name: "base", raw: "http://localhost:39999", want: "http://localhost:39999/gpushare-scheduler/inspect"},
		{name: "trailing slash and node", raw: "http://localhost:39999/", node: "gpu-a", want: "http://localhost:39999/gpushare-scheduler/inspect/gpu-a"},
		{name: "full path", raw: "https://ext.example/gpushare-scheduler/inspect", want: "https://ext.example/gpushare-scheduler/inspect"},
		{name: "behind a proxy path", raw: "http://127.0.0.1:8001/api/v1/namespaces/kube-system/services/ext:39999/proxy",
			want: "http://127.0.0.1:8001/api/v1/namespaces/kube-system/services/ext:39999/proxy/gpushare-scheduler/inspect"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseExtenderURL(tc.raw, tc.node)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
