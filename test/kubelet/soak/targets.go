package soak

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/kubelet/cluster"
)

// Component is a process a fault can crash and bring back: the extender,
// kube-scheduler, a node's device plugin.
type Component interface {
	// Name identifies it in the output, e.g. "extender", "t4-1/plugin".
	Name() string
	// Kill ends it with SIGKILL (a crash) and returns once it has exited.
	Kill() error
	// Start starts it again and returns once it serves (or, for a device
	// plugin, once the process runs: it registers on its own).
	Start(ctx context.Context) error
}

// Replica is a Component that is one of several replicas of which one
// leads (an extender sidecar, a kube-scheduler replica); the injector
// names its role when it kills it.
type Replica interface {
	// Role says whether it leads now: "leader", "follower", or "" when
	// it cannot tell (the API does not answer).
	Role(ctx context.Context) string
}

// Pausable is a process a fault can freeze (SIGSTOP) and thaw (SIGCONT).
type Pausable interface {
	Name() string
	Pause() error
	Resume() error
}

// Restarter restarts in place: a node agent restarting kubelet's device
// manager, which re-creates kubelet.sock so the plugin registers again.
type Restarter interface {
	Name() string
	Restart() error
}

// Cards are a node's GPUs, whose health a fault can flip.
type Cards interface {
	Name() string
	// Count is how many cards the node has (indexes 0..Count-1).
	Count() int
	// SetHealthy marks card index unhealthy (an XID whose probe keeps
	// failing) or lets it recover (the probe answers again).
	SetHealthy(ctx context.Context, index int, healthy bool) error
}

// Targets are what the injector may fault, by kind of fault.
type Targets struct {
	Extenders  []Component // KindExtenderKill
	Schedulers []Component // KindSchedulerKill
	Plugins    []Component // KindPluginKill
	Kubelets   []Restarter // KindKubeletRestart
	APIServers []Pausable  // KindAPIServerPause
	Cards      []Cards     // KindCardUnhealthy
}

// count returns how many targets a kind of fault has.
func (t Targets) count(k Kind) int {
	switch k {
	case KindExtenderKill:
		return len(t.Extenders)
	case KindSchedulerKill:
		return len(t.Schedulers)
	case KindPluginKill:
		return len(t.Plugins)
	case KindKubeletRestart:
		return len(t.Kubelets)
	case KindAPIServerPause:
		return len(t.APIServers)
	case KindCardUnhealthy:
		return len(t.Cards)
	}
	return 0
}

// ClusterTargets returns the targets of a cluster: every extender and
// kube-scheduler replica (leader and followers alike, with the sidecar
// topology), its kube-apiserver, and each node's plugin, node agent and
// cards.
func ClusterTargets(c *cluster.Cluster) Targets {
	t := Targets{APIServers: []Pausable{apiServer{c.CP}}}
	for i := range c.ExtenderReplicas() {
		t.Extenders = append(t.Extenders, extender{c, i})
	}
	for i := range c.CP.SchedulerReplicas() {
		t.Schedulers = append(t.Schedulers, scheduler{c, i})
	}
	for _, n := range c.Nodes() {
		t.Plugins = append(t.Plugins, plugin{c, n.Spec.Name})
		t.Kubelets = append(t.Kubelets, kubelet{c, n.Spec.Name})
		t.Cards = append(t.Cards, nodeCards{c, n.Spec.Name, len(n.Cards)})
	}
	return t
}

// role says whether replica i (extender sidecar i, kube-scheduler replica
// i: the same index) leads, by the Lease's holder; "" with one replica or
// when the Lease cannot be read. Right after a leading kube-scheduler was
// killed and started again, its replica still reads as the leader until
// the Lease of its previous process expires (LeaseDuration): its sidecar
// is the one that may bind until then, but its new kube-scheduler process
// does not lead (scheduler.Role says so).
func role(ctx context.Context, c *cluster.Cluster, i int) string {
	if c.ExtenderReplicas() < 2 {
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	leader, err := c.Leader(rctx)
	switch {
	case err != nil:
		return ""
	case leader == i:
		return "leader"
	}
	return "follower"
}

type extender struct {
	c *cluster.Cluster
	i int
}

func (e extender) Name() string { return e.c.ExtenderName(e.i) }
func (e extender) Kill() error {
	e.c.StopExtenderReplica(e.i, true)
	return nil
}
func (e extender) Start(ctx context.Context) error { return e.c.StartExtenderReplica(ctx, e.i) }
func (e extender) Role(ctx context.Context) string { return role(ctx, e.c, e.i) }

type scheduler struct {
	c *cluster.Cluster
	i int
}

func (s scheduler) Name() string {
	if h := s.c.CP.SchedulerHost(s.i); h != "" {
		return h
	}
	return framework.SchedulerName
}
func (s scheduler) Kill() error                     { return s.c.CP.KillScheduler(s.i) }
func (s scheduler) Start(ctx context.Context) error { return s.c.CP.StartScheduler(ctx, s.i) }

// Role is role's, but a replica whose running process does not hold the
// Lease (its killed predecessor's has not expired yet) is no leader.
func (s scheduler) Role(ctx context.Context) string {
	r := role(ctx, s.c, s.i)
	if r != "leader" {
		return r
	}
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	leads, err := s.c.CP.SchedulerLeads(rctx, s.i)
	switch {
	case err != nil:
		return ""
	case !leads:
		return "follower, the lease still its killed predecessor's"
	}
	return r
}

type plugin struct {
	c    *cluster.Cluster
	node string
}

func (p plugin) Name() string { return p.node + "/plugin" }
func (p plugin) Kill() error {
	p.c.StopPlugin(p.node, true)
	return nil
}
func (p plugin) Start(ctx context.Context) error { return p.c.StartPlugin(ctx, p.node) }

type apiServer struct{ cp *framework.ControlPlane }

func (apiServer) Name() string    { return framework.APIServerName }
func (a apiServer) Pause() error  { return a.cp.Signal(framework.APIServerName, syscall.SIGSTOP) }
func (a apiServer) Resume() error { return a.cp.Signal(framework.APIServerName, syscall.SIGCONT) }

type kubelet struct {
	c    *cluster.Cluster
	node string
}

func (k kubelet) Name() string   { return k.node + "/kubelet" }
func (k kubelet) Restart() error { return k.c.RestartKubelet(k.node) }

type nodeCards struct {
	c     *cluster.Cluster
	node  string
	count int
}

func (n nodeCards) Name() string { return n.node }
func (n nodeCards) Count() int   { return n.count }

// SetHealthy drives the plugin's fake cards: a failing probe and XID 79
// (fallen off the bus) make the card unhealthy and keep it so; a probe that
// answers lets it recover after the plugin's recovery window.
func (n nodeCards) SetHealthy(ctx context.Context, index int, healthy bool) error {
	cmds := []string{fmt.Sprintf("probe %d fail", index), fmt.Sprintf("xid %d 79", index)}
	if healthy {
		cmds = []string{fmt.Sprintf("probe %d ok", index)}
	}
	for _, cmd := range cmds {
		if err := n.c.FakeGPU(ctx, n.node, cmd); err != nil {
			return fmt.Errorf("card %d of node %s: %w", index, n.node, err)
		}
	}
	return nil
}
