package integration

import (
	"testing"
	"time"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// TestTwoCardPodsShareCards: pods asking aliyun.com/gpu-count: 2 share
// cards by memory like any other, through the real kube-scheduler with the
// shipped configuration. The device plugin publishes no gpu-count
// capacity (kubelet would count it as a consumable resource and refuse a
// third such pod on four cards) and the configuration marks gpu-count
// ignoredByScheduler, so NodeResourcesFit neither needs nor consumes it
// and the extender alone decides by memory: three pods of 2 × 4 GiB fit on
// four 16 GiB cards. Without either, they waited with "Insufficient
// aliyun.com/gpu-count" (the chaos soak found it).
func TestTwoCardPodsShareCards(t *testing.T) {
	c := startCluster(t)
	n := util.MakeNode("quad").Cards("Tesla T4", 16, 16, 16, 16).Obj()
	delete(n.Status.Capacity, gpushare.ResourceGPUCount) // as the device plugin publishes it
	delete(n.Status.Allocatable, gpushare.ResourceGPUCount)
	c.addNode(t, n)
	names := []string{"two-0", "two-1", "two-2"}
	for _, name := range names {
		c.createPod(t, util.MakePod(name).GPUMemCards(8, 2).Obj())
	}
	c.waitBound(t, names, 60*time.Second)
}
