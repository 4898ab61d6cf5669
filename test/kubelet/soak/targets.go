package soak

import (
	"context"
	"fmt"
	"syscall"

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

// ClusterTargets returns the targets of a cluster: its one extender, its
// one kube-scheduler, its kube-apiserver, and each node's plugin, node
// agent and cards.
func ClusterTargets(c *cluster.Cluster) Targets {
	t := Targets{
		Extenders:  []Component{extender{c}},
		Schedulers: []Component{scheduler{c.CP}},
		APIServers: []Pausable{apiServer{c.CP}},
	}
	for _, n := range c.Nodes() {
		t.Plugins = append(t.Plugins, plugin{c, n.Spec.Name})
		t.Kubelets = append(t.Kubelets, kubelet{c, n.Spec.Name})
		t.Cards = append(t.Cards, nodeCards{c, n.Spec.Name, len(n.Cards)})
	}
	return t
}

type extender struct{ c *cluster.Cluster }

func (extender) Name() string { return "extender" }
func (e extender) Kill() error {
	e.c.StopExtender(true)
	return nil
}
func (e extender) Start(ctx context.Context) error { return e.c.StartExtender(ctx) }

type scheduler struct{ cp *framework.ControlPlane }

func (scheduler) Name() string                      { return framework.SchedulerName }
func (s scheduler) Kill() error                     { return s.cp.KillScheduler() }
func (s scheduler) Start(ctx context.Context) error { return s.cp.StartScheduler(ctx) }

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
