package cache

import (
	"context"

	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// Filter splits nodes into those where pod's Demand fits, on the cards its
// constraints allow, and those where it does not, with the reason for each.
// It fails, naming the pod, when no node could take it, and when ctx ends
// before every node was examined. It reads the nodes' published copies and
// takes no lock. The searches of all nodes together spend one request
// budget (allocator.DefaultRequestSteps). Nodes it leaves unexamined fail
// with a reason that says so.
func (c *Cache) Filter(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (fit []string, failed map[string]string, err error) {
	return c.view.Filter(ctx, pod, nodes)
}

// FilterBest is Filter keeping, of the nodes where pod's Demand fits, only
// those Score rates highest (allocator.MaxScore). Of those it keeps the
// first allocator.MaxBestNodes in nodes' order. The extender's choice of
// node then decides, and kube-scheduler's own scores only break ties among
// them. The nodes left out are not failed: they fit, but are not the best
// or not needed. Each node is fitted once.
func (c *Cache) FilterBest(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) (best []string, failed map[string]string, err error) {
	return c.view.FilterBest(ctx, pod, nodes)
}

// Score rates each node for pod's Demand with the pod's policy (the default
// when it names none), 0..allocator.MaxScore, parallel to nodes. A node
// where the demand does not fit scores 0. Policies that weigh CPU and
// memory too (allocator.HostScorer) get the pod's requests, and the node's
// free CPU and memory on nodes that report their CPU.
func (c *Cache) Score(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) ([]int64, error) {
	return c.view.Score(ctx, pod, nodes)
}

// ScoreCPU rates each node for pod, which asks no GPU memory, with the
// pod's policy (the default when it names none), parallel to nodes. The
// nodes where its CPUScorer rates the pod highest get allocator.MaxScore,
// as the pod strands the least GPU memory there; the others get 0
// (allocator.MarkBest). A node the cache does not know, or that reports no
// CPU, strands nothing. A policy that is no CPUScorer rates every node
// MaxScore: it has no opinion, and kube-scheduler's own scores choose. It
// takes no lock.
func (c *Cache) ScoreCPU(ctx context.Context, pod *kubeinfo.PodInfo, nodes []string) ([]int64, error) {
	return c.view.ScoreCPU(ctx, pod, nodes)
}
