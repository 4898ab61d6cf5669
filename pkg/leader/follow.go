package leader

import (
	"context"
	"fmt"
	"strings"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// FollowConfig names the scheduler's Lease a sidecar follows.
type FollowConfig struct {
	// Namespace and Name of kube-scheduler's Lease: kube-system and
	// kube-scheduler, or its leaderElection.resourceName.
	Namespace, Name string
	// Identity is this pod's name. kube-scheduler's holder identity is the
	// host name (the pod name), then "_" and a UUID.
	Identity string
}

// Ours reports whether holder, a Lease's holderIdentity, names the
// scheduler of pod identity: "identity" or "identity_<suffix>".
func Ours(holder, identity string) bool {
	rest, ok := strings.CutPrefix(holder, identity)
	return ok && (rest == "" || strings.HasPrefix(rest, "_"))
}

// follower applies a followed Lease's records to a gate.
type follower struct {
	gate     *Gate
	identity string
	logger   klog.Logger
	ctx      context.Context
	// leading: the last record seen named us. transitions: its
	// leaseTransitions. A change while ours is a new term: the Lease was lost
	// and taken back in between.
	leading     bool
	transitions int32
}

// observe applies one version of the Lease; nil for its delete.
func (f *follower) observe(l *coordinationv1.Lease) {
	var holder string
	var transitions int32
	if l != nil {
		if l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		if l.Spec.LeaseTransitions != nil {
			transitions = *l.Spec.LeaseTransitions
		}
	}
	ours := holder != "" && Ours(holder, f.identity)
	if ours && l.Spec.RenewTime != nil {
		f.gate.renewal(l.Spec.RenewTime.Time)
	}
	switch {
	case ours && (!f.leading || transitions != f.transitions):
		f.gate.begin(f.ctx)
	case !ours && f.leading:
		f.gate.end(f.logger)
	}
	f.leading, f.transitions = ours, transitions
}

// Follow watches the scheduler's Lease until ctx ends. It makes g serve
// while the holder is this pod's scheduler, each new term after a
// catch-up. Binding writes are fenced to the Lease's renewTime plus g's
// renew deadline: the scheduler and its sidecar share the host's clock.
func Follow(ctx context.Context, client kubernetes.Interface, cfg FollowConfig, g *Gate) error {
	if cfg.Namespace == "" || cfg.Name == "" || cfg.Identity == "" {
		return fmt.Errorf("the followed lease's namespace (%q), name (%q) and this pod's identity (%q) must be set", cfg.Namespace, cfg.Name, cfg.Identity)
	}
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(cfg.Namespace, cfg.Name), "identity", cfg.Identity)
	ctx = klog.NewContext(ctx, logger)
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", cfg.Name).String()
		}))
	f := &follower{gate: g, identity: cfg.Identity, logger: logger, ctx: ctx}
	events := make(chan *coordinationv1.Lease, 16)
	send := func(l *coordinationv1.Lease) {
		select {
		case events <- l:
		case <-ctx.Done():
		}
	}
	_, err := factory.Coordination().V1().Leases().Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l, _ := obj.(*coordinationv1.Lease); send(l) },
		UpdateFunc: func(_, obj any) { l, _ := obj.(*coordinationv1.Lease); send(l) },
		DeleteFunc: func(any) { send(nil) },
	})
	if err != nil {
		return fmt.Errorf("watching lease %s/%s: %w", cfg.Namespace, cfg.Name, err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	for {
		select {
		case l := <-events:
			f.observe(l)
		case <-ctx.Done():
			g.end(logger)
			return nil
		}
	}
}
