package inspect

import (
	"bytes"
	"context"
	"flag"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpushare/gpushare/test/util"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// run runs the command with args against env's client and returns the exit
// status, stdout and stderr.
func run(t *testing.T, env Env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	env.Args = args
	env.Streams = genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut}
	code = Main(context.Background(), env)
	return code, out.String(), errOut.String()
}

// fakeEnv returns an Env whose API is a fake clientset holding objs.
func fakeEnv(objs ...runtime.Object) Env {
	client := fake.NewClientset(objs...)
	return Env{NewClient: func(genericclioptions.RESTClientGetter) (kubernetes.Interface, error) { return client, nil }}
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	util.Golden(t, name, got, *update)
}

func TestGolden(t *testing.T) {
	tests := []struct {
		name   string
		objs   []runtime.Object
		args   []string
		tty    bool
		golden string
	}{
		{name: "empty cluster", args: nil, golden: "empty.txt"},
		{name: "empty cluster, only nodes without GPUs", objs: objs(cpuOnly()), golden: "empty.txt"},
		{name: "empty cluster json", args: []string{"-o", "json"}, golden: "empty.json"},
		{name: "empty selection", objs: cluster(), args: []string{"-l", "pool=none"}, golden: "empty-selector.txt"},
		{name: "mixed cards and units", objs: join(objs(nodeA(), nodeMiB()), podsA(), podsMiB()), golden: "mixed-cards.txt"},
		{name: "mixed cards wide", objs: join(objs(nodeA(), nodeMiB()), podsA(), podsMiB()), args: []string{"-o", "wide"}, golden: "mixed-cards-wide.txt"},
		{name: "multi-container pod", objs: join(objs(nodeA()), podsA()), args: []string{"-d"}, golden: "multi-container-details.txt"},
		{name: "unscheduled gpu-mem pods", objs: join(objs(nodeC()), podsC(), pending()), golden: "unscheduled.txt"},
		{name: "unhealthy card", objs: join(objs(nodeB()), podsB()), golden: "unhealthy.txt"},
		{name: "unhealthy card details", objs: join(objs(nodeB()), podsB()), args: []string{"-d"}, golden: "unhealthy-details.txt"},
		{name: "cluster", objs: cluster(), golden: "cluster.txt"},
		{name: "cluster wide", objs: cluster(), args: []string{"-o", "wide"}, golden: "cluster-wide.txt"},
		{name: "cluster on a terminal", objs: cluster(), tty: true, golden: "cluster-tty.txt"},
		{name: "cluster details", objs: cluster(), args: []string{"-d"}, golden: "cluster-details.txt"},
		{name: "cluster details on a terminal", objs: cluster(), args: []string{"--details"}, tty: true, golden: "cluster-details-tty.txt"},
		{name: "details of one namespace", objs: cluster(), args: []string{"-d", "-n", "team-a"}, golden: "cluster-details-team-a.txt"},
		{name: "-A overrides -n", objs: cluster(), args: []string{"-d", "-n", "team-a", "-A"}, golden: "cluster-details.txt"},
		{name: "json", objs: cluster(), args: []string{"-o", "json"}, golden: "cluster.json"},
		{name: "json ignores the terminal and -d", objs: cluster(), args: []string{"-o", "json", "-d"}, tty: true, golden: "cluster.json"},
		{name: "yaml", objs: cluster(), args: []string{"-o", "yaml"}, golden: "cluster.yaml"},
		{name: "one node", objs: cluster(), args: []string{"gpu-b", "-d"}, golden: "node-gpu-b-details.txt"},
		{name: "one node without GPUs", objs: cluster(), args: []string{"cpu-only"}, golden: "node-cpu-only.txt"},
		{name: "broken inventory, card gone", objs: brokenInventory(), golden: "broken-inventory.txt"},
		{name: "broken inventory, card gone, details", objs: brokenInventory(), args: []string{"-d"}, golden: "broken-inventory-details.txt"},
		{name: "label selector", objs: cluster(), args: []string{"-l", "pool=a"}, golden: "selector-pool-a.txt"},
		{name: "cards chosen and cordoned", objs: cardsChosen(), golden: "cards-chosen.txt"},
		{name: "cards chosen and cordoned, wide", objs: cardsChosen(), args: []string{"-o", "wide"}, golden: "cards-chosen-wide.txt"},
		{name: "cards chosen and cordoned, details", objs: cardsChosen(), args: []string{"-d"}, golden: "cards-chosen-details.txt"},
		{name: "cards chosen and cordoned, json", objs: cardsChosen(), args: []string{"-o", "json"}, golden: "cards-chosen.json"},
		{name: "DRA nodes beside the device plugin's", objs: join(cluster(), draCluster()), golden: "dra.txt"},
		{name: "DRA nodes, details", objs: draCluster(), args: []string{"-d"}, golden: "dra-details.txt"},
		{name: "DRA nodes, one namespace", objs: draCluster(), args: []string{"-d", "-n", "team-a"}, golden: "dra-details-team-a.txt"},
		{name: "DRA nodes, json", objs: draCluster(), args: []string{"-o", "json"}, golden: "dra.json"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env := fakeEnv(tc.objs...)
			env.TTY = tc.tty
			code, stdout, stderr := run(t, env, tc.args...)
			if code != 0 {
				t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
			}
			got := stdout
			if stderr != "" {
				got += "--- stderr ---\n" + stderr
			}
			golden(t, tc.golden, got)
		})
	}
}
