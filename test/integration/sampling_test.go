package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/gpushare/gpushare/pkg/sampling"
	"github.com/gpushare/gpushare/test/integration/extenders"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// TestSchedulerSamplesAsSimulated checks how many nodes kube-scheduler
// hands the extender's filter on 150 nodes that all fit, against
// sampling.NodesToFind: with the shipped percentageOfNodesToScore (the
// adaptive default: 100 of them, as the simulator replays by default) and
// with 100 (every node).
func TestSchedulerSamplesAsSimulated(t *testing.T) {
	const nodes, pods = 150, 3
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	shippedData, err := os.ReadFile(filepath.Join(root, "config", "kube-scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var shipped struct {
		Percentage *int32 `json:"percentageOfNodesToScore"`
	}
	if err := yaml.Unmarshal(shippedData, &shipped); err != nil {
		t.Fatal(err)
	}
	noopCfg := filepath.Join(t.TempDir(), "noop-scheduler-config.yaml")
	if err := os.WriteFile(noopCfg, []byte(extenders.NoopSchedulerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	// The shipped value goes on the no-op extender's configuration (that
	// extender does not bind).
	asShipped, shippedValue := framework.PercentageSetting{Name: "unset"}, int32(0)
	if shipped.Percentage != nil {
		asShipped = framework.PercentageSetting{Name: strconv.Itoa(int(*shipped.Percentage)), Value: shipped.Percentage}
		shippedValue = *shipped.Percentage
	}
	for _, tc := range []struct {
		name string
		set  framework.PercentageSetting
		want int
	}{
		{"shipped", asShipped, sampling.NodesToFind(shippedValue, nodes)},
		{"every node", framework.PercentageSetting{Name: "100", Value: ptr.To[int32](100)}, nodes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []int
			url := extenders.Noop(t, func(names []string) {
				mu.Lock()
				got = append(got, len(names))
				mu.Unlock()
			})
			cp := framework.StartT(t, framework.Options{ExtenderURL: url, SchedulerConfig: tc.set.Apply(t, noopCfg)})
			c := cp.Client(framework.AdminUser)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			framework.Parallel(t, nodes, func(i int) error {
				return framework.CreateNode(ctx, c, util.MakeNode(fmt.Sprintf("node-%03d", i)).Cards("V100", 32, 32).Obj())
			})
			time.Sleep(2 * time.Second) // the scheduler's cache sees every node
			for i := range pods {
				p := util.MakePod(fmt.Sprintf("p%d", i)).GPUMem(4).Obj()
				p.UID = ""
				if _, err := c.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
				list, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
				if err != nil {
					return false, err
				}
				for _, p := range list.Items {
					if p.Spec.NodeName == "" {
						return false, nil
					}
				}
				return len(list.Items) == pods, nil
			})
			if err != nil {
				t.Fatalf("waiting for %d pods to bind: %v", pods, err)
			}
			mu.Lock()
			defer mu.Unlock()
			want := make([]int, pods)
			for i := range want {
				want[i] = tc.want
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("nodes in each filter call (-want +got):\n%s", diff)
			}
		})
	}
}
