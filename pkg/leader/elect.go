package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Defaults of the election, the same as kube-scheduler's and
// kube-controller-manager's.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// ElectConfig configures the standalone replicas' election.
type ElectConfig struct {
	// Namespace and Name of the Lease.
	Namespace, Name string
	// Identity of this replica (its pod name).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod are as in client-go's
	// leader election. RenewDeadline < LeaseDuration, and the difference is
	// the package doc's safety margin.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Validate checks the durations and names.
func (c *ElectConfig) Validate() error {
	var errs []error
	if c.Namespace == "" || c.Name == "" || c.Identity == "" {
		errs = append(errs, fmt.Errorf("the lease namespace (%q), name (%q) and identity (%q) must be set", c.Namespace, c.Name, c.Identity))
	}
	if c.RetryPeriod <= 0 || c.RenewDeadline <= c.RetryPeriod || c.LeaseDuration <= c.RenewDeadline {
		errs = append(errs, fmt.Errorf("need 0 < retry period (%s) < renew deadline (%s) < lease duration (%s)", c.RetryPeriod, c.RenewDeadline, c.LeaseDuration))
	}
	return errors.Join(errs...)
}

// fencedLock records each renewal of the Lease in the gate. On release it
// ends the term and lets the in-flight Binding writes drain first.
type fencedLock struct {
	resourcelock.Interface
	gate  *Gate
	grace time.Duration
}

func (l *fencedLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if err := l.Interface.Create(ctx, r); err != nil {
		return err
	}
	if r.HolderIdentity == l.Identity() {
		l.gate.renewal(r.RenewTime.Time)
	}
	return nil
}

func (l *fencedLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if r.HolderIdentity != l.Identity() {
		// Release: stop binding, and give the writes already sent the
		// margin, as another replica may take over at once.
		l.gate.end(klog.FromContext(ctx))
		l.gate.drain(ctx, l.grace)
		return l.Interface.Update(ctx, r)
	}
	if err := l.Interface.Update(ctx, r); err != nil {
		return err
	}
	l.gate.renewal(r.RenewTime.Time)
	return nil
}

// Elect runs the election until ctx ends. It runs as a candidate until it
// holds the Lease, then as leader until it loses it, then as a candidate
// again. As leader, g serves after its catch-up. When ctx ends, the Lease
// is released once the in-flight Binding writes have returned and the
// safety margin has passed.
func Elect(ctx context.Context, client kubernetes.Interface, cfg ElectConfig, g *Gate) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("lease", klog.KRef(cfg.Namespace, cfg.Name), "identity", cfg.Identity)
	ctx = klog.NewContext(ctx, logger)
	lock, err := resourcelock.New(resourcelock.LeasesResourceLock, cfg.Namespace, cfg.Name, client.CoreV1(), client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: cfg.Identity})
	if err != nil {
		return fmt.Errorf("building the lease lock %s/%s: %w", cfg.Namespace, cfg.Name, err)
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            &fencedLock{Interface: lock, gate: g, grace: cfg.LeaseDuration - cfg.RenewDeadline},
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: g.begin,
			OnStoppedLeading: func() { g.end(logger) },
			OnNewLeader: func(identity string) {
				logger.V(2).Info("Leader observed", "leader", identity)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("configuring the leader election: %w", err)
	}
	for ctx.Err() == nil {
		le.Run(ctx)
	}
	return nil
}
