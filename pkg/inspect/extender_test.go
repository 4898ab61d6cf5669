package inspect

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/feed"
)

// TestExtenderAgrees runs the real extender (informers, cache, inspect
// route) on the same cluster and checks that --from-extender and the API
// source report the same cards, pods and totals.
func TestExtenderAgrees(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	client := fake.NewClientset(cluster()...)
	c, err := cache.New(cache.Config{})
	if err != nil {
		t.Fatal(err)
	}
	feeder, err := feed.New(ctx, c, client)
	if err != nil {
		t.Fatal(err)
	}
	feeder.Start(ctx)
	if !feeder.WaitForSync(ctx) {
		t.Fatal("informers did not sync")
	}
	h, err := extender.NewHandlers(logger, extender.HandlersConfig{Placer: c, Viewer: c, Ready: feeder.Synced})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Router())
	defer srv.Close()

	tests := []struct {
		name string
		args []string
	}{
		{name: "all nodes"},
		{name: "one node", args: []string{"gpu-b"}},
		{name: "one namespace", args: []string{"-n", "team-a"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fromAPI := report(t, fakeEnv(cluster()...), append(tc.args, "-o", "json")...)
			fromExt := report(t, Env{}, append(tc.args, "-o", "json", "--from-extender", srv.URL)...)
			if len(fromAPI.Nodes) == 0 {
				t.Fatal("no nodes")
			}
			// The extender knows no addresses and no pending pods.
			ignore := cmp.Options{cmpopts.IgnoreFields(Report{}, "Source", "Pending"), cmpopts.IgnoreFields(Node{}, "Address")}
			if diff := cmp.Diff(fromAPI, fromExt, ignore); diff != "" {
				t.Errorf("API (-) and extender (+) disagree:\n%s", diff)
			}
		})
	}

	code, stdout, stderr := run(t, Env{}, "--from-extender", srv.URL)
	if code != 0 {
		t.Fatalf("exit status %d: %s", code, stderr)
	}
	golden(t, "extender.txt", stdout)
}

func report(t *testing.T, env Env, args ...string) *Report {
	t.Helper()
	code, stdout, stderr := run(t, env, args...)
	if code != 0 {
		t.Fatalf("exit status %d: %s", code, stderr)
	}
	var r Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatal(err)
	}
	return &r
}
