package soak

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/test/kubelet/cluster"
)

// checkTimeout bounds each read of one check (the API, PodResources, the
// extender): a paused API server or a killed extender skips a part of a
// check, it does not hold up the next.
const checkTimeout = 5 * time.Second

// Checker checks the invariants that hold at every moment, on a cluster.
type Checker struct {
	c       *cluster.Cluster
	vs      *Violations
	log     *printer
	pr      *podResources
	http    *http.Client
	lasting *Lasting

	// rounds counts the checks run; skipped those whose API reads failed.
	rounds, skipped int
}

// NewChecker returns a checker of c; a difference between the extender's
// inspect and the API's may last inspectBound.
func NewChecker(c *cluster.Cluster, vs *Violations, log *printer, inspectBound time.Duration) *Checker {
	return &Checker{c: c, vs: vs, log: log, pr: newPodResources(), http: &http.Client{Timeout: checkTimeout}, lasting: NewLasting(inspectBound)}
}

// Run checks every period until ctx ends.
func (k *Checker) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			k.Once(ctx)
		}
	}
}

// Once runs one check of every continuous invariant and returns the
// differences between the leading extender's inspect and the API seen now
// and where it read the inspect (nil when the extender could not be read:
// then ok is false). The leading extender is the sidecar of the
// kube-scheduler replica that holds the Lease: the followers' caches may
// lag by design (no one binds through them), so they are not compared.
func (k *Checker) Once(ctx context.Context) (inspectDiffs []string, url string, ok bool) {
	k.rounds++
	rctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	nodes, err := k.c.Admin.CoreV1().Nodes().List(rctx, metav1.ListOptions{})
	if err != nil {
		k.skipped++
		return nil, "", false
	}
	pods, err := k.c.Admin.CoreV1().Pods(metav1.NamespaceAll).List(rctx, metav1.ListOptions{})
	if err != nil {
		k.skipped++
		return nil, "", false
	}
	k.vs.Checked(InvCards)
	for _, b := range cluster.CheckCards(nodes.Items, pods.Items) {
		k.vs.Add(InvCards, b)
	}
	k.vs.Checked(InvEnv)
	for _, b := range CheckEnv(pods.Items) {
		k.vs.Add(InvEnv, b)
	}
	for i := range nodes.Items {
		n := k.c.Node(nodes.Items[i].Name)
		if n == nil {
			continue
		}
		listed, err := k.pr.List(rctx, n.PodResourcesSocket())
		if err != nil {
			continue // the node agent is busy; the next check reads it
		}
		k.vs.Checked(InvKubelet)
		for _, b := range CheckKubelet(&nodes.Items[i], pods.Items, listed) {
			k.vs.Add(InvKubelet, b)
		}
	}
	url, err = leaderURL(rctx, k.c)
	if err != nil {
		return nil, err.Error(), false // no leader now (a failover)
	}
	views, err := readInspect(rctx, k.http, url)
	if err != nil {
		return nil, url, false // the extender is down or restarting
	}
	k.vs.Checked(InvInspect)
	diffs := InspectDiff(views, nodes.Items, pods.Items)
	for _, b := range k.lasting.Observe(time.Now(), diffs) {
		k.vs.Add(InvInspect, b)
	}
	return diffs, url, true
}

// leaderURL returns the URL of the extender that places pods now: the
// sidecar of the kube-scheduler replica that holds the Lease, or the only
// extender.
func leaderURL(ctx context.Context, c *cluster.Cluster) (string, error) {
	i, err := c.Leader(ctx)
	if err != nil {
		return "", fmt.Errorf("reading which kube-scheduler replica leads: %w", err)
	}
	if i < 0 {
		return "", errors.New("no kube-scheduler replica holds the lease")
	}
	return c.ExtenderReplicaURL(i), nil
}

// Close releases the PodResources connections.
func (k *Checker) Close() { k.pr.Close() }
