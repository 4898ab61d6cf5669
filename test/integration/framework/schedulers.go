package framework

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/gpushare/gpushare/pkg/leader"
)

// SchedulerHA starts kube-scheduler as replicas that elect a leader with
// one Lease, as the replicas of a highly available control plane do.
//
// kube-scheduler's identity in the Lease is its host name, "_", and a UUID
// drawn at each start. In a cluster the host name is the pod's name, which
// an extender sidecar in the same pod knows (--follow-scheduler-lease with
// --leader-elect-identity). Here every replica runs in its own UTS
// namespace (StartProcWithHostname) with its own host name, so that the sidecars can
// tell the replicas apart as they would in pods.
type SchedulerHA struct {
	// Replicas are the replicas, each with its own extender URL.
	Replicas []SchedulerReplica
	// LeaseNamespace and LeaseName name the Lease; default
	// kube-system/kube-scheduler.
	LeaseNamespace, LeaseName string
	// LeaseDuration, RenewDeadline and RetryPeriod are leaderElection's;
	// zero: kube-scheduler's defaults (15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// SchedulerReplica is one kube-scheduler replica.
type SchedulerReplica struct {
	// Host is its host name (its pod's name), a DNS label unique among the
	// replicas; it names its process and log too.
	Host string
	// ExtenderURL replaces Options.ExtenderURL for this replica: the
	// extender sidecar beside it. Empty: Options.ExtenderURL.
	ExtenderURL string
}

// withDefaults returns ha with its zero fields set, or an error for
// replicas without a valid, unique host name.
func (ha SchedulerHA) withDefaults() (SchedulerHA, error) {
	if len(ha.Replicas) == 0 {
		return ha, errors.New("scheduler HA: no replicas")
	}
	seen := map[string]bool{}
	for _, r := range ha.Replicas {
		if errs := validation.IsDNS1123Label(r.Host); len(errs) > 0 || seen[r.Host] {
			return ha, fmt.Errorf("scheduler HA: replica host name %q must be a unique DNS label %v", r.Host, errs)
		}
		seen[r.Host] = true
	}
	if ha.LeaseNamespace == "" {
		ha.LeaseNamespace = metav1.NamespaceSystem
	}
	if ha.LeaseName == "" {
		ha.LeaseName = SchedulerName
	}
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&ha.LeaseDuration, 15*time.Second)
	set(&ha.RenewDeadline, 10*time.Second)
	set(&ha.RetryPeriod, 2*time.Second)
	return ha, nil
}

// schedulerReplica is a started kube-scheduler replica.
type schedulerReplica struct {
	name string // process and log name
	host string // its own host name; "" shares this machine's
	url  string // https://127.0.0.1:PORT
	args []string
}

// schedulerReplicas writes each replica's configuration and picks its port.
func (cp *ControlPlane) schedulerReplicas(opts Options) ([]*schedulerReplica, error) {
	wanted := []SchedulerReplica{{ExtenderURL: opts.ExtenderURL}}
	if opts.SchedulerHA != nil {
		ha, err := opts.SchedulerHA.withDefaults()
		if err != nil {
			return nil, err
		}
		opts.SchedulerHA, cp.lease = &ha, &ha
		wanted = ha.Replicas
	}
	ports, err := freePorts(len(wanted))
	if err != nil {
		return nil, err
	}
	var out []*schedulerReplica
	for i, w := range wanted {
		r := &schedulerReplica{name: SchedulerName, host: w.Host, url: "https://127.0.0.1:" + strconv.Itoa(ports[i])}
		if w.Host != "" {
			r.name = w.Host
		}
		url := w.ExtenderURL
		if url == "" {
			url = opts.ExtenderURL
		}
		cfgPath, err := cp.writeSchedulerConfig(opts, url, r.name+"-config.yaml")
		if err != nil {
			return nil, err
		}
		r.args = []string{"--config=" + cfgPath, "--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[i]), "--v=2"}
		out = append(out, r)
	}
	return out, nil
}

// start starts the replica, in a UTS namespace of its own when it has a
// host name (StartProcWithHostname).
func (r *schedulerReplica) start(bin, logPath string) (*Proc, error) {
	if r.host == "" {
		return StartProc(r.name, bin, r.args, logPath)
	}
	return StartProcWithHostname(r.name, r.host, bin, r.args, logPath)
}

// SchedulerReplicas is the number of kube-scheduler replicas started.
func (cp *ControlPlane) SchedulerReplicas() int { return len(cp.schedulers) }

// SchedulerHost is replica i's host name (its name in the Lease, before
// "_"), or "" when it shares this machine's.
func (cp *ControlPlane) SchedulerHost(i int) string { return cp.schedulers[i].host }

// SchedulerLease is the Lease the replicas elect their leader with, as
// namespace and name; "", "" without Options.SchedulerHA.
func (cp *ControlPlane) SchedulerLease() (namespace, name string) {
	if cp.lease == nil {
		return "", ""
	}
	return cp.lease.LeaseNamespace, cp.lease.LeaseName
}

// SchedulerLeader reads the Lease and returns the index of the replica
// whose host name its holderIdentity starts with, and that identity; -1
// when none (no Lease yet, or released). A replica just killed still leads
// by this reading until another takes the Lease, LeaseDuration after its
// last renewal: its identity is still there.
func (cp *ControlPlane) SchedulerLeader(ctx context.Context) (int, string, error) {
	i, l, err := cp.schedulerLease(ctx)
	if l == nil || l.Spec.HolderIdentity == nil {
		return i, "", err
	}
	return i, *l.Spec.HolderIdentity, err
}

// SchedulerLeads reports whether replica i's running process holds the
// Lease: SchedulerLeader names it, and the Lease was acquired after this
// process started (not by the process killed before it, whose Lease has not
// expired yet). kube-scheduler writes acquireTime with this machine's clock.
func (cp *ControlPlane) SchedulerLeads(ctx context.Context, i int) (bool, error) {
	holder, l, err := cp.schedulerLease(ctx)
	if err != nil || holder != i || l.Spec.AcquireTime == nil {
		return false, err
	}
	p := cp.proc(cp.schedulers[i].name)
	return p != nil && !p.Exited() && !l.Spec.AcquireTime.Time.Before(p.started), nil
}

// schedulerLease reads the Lease and returns it with the index of the
// replica whose host name its holder starts with (-1: none, or no Lease).
func (cp *ControlPlane) schedulerLease(ctx context.Context) (int, *coordinationv1.Lease, error) {
	if cp.lease == nil {
		return -1, nil, errors.New("reading the scheduler leader: kube-scheduler runs without leader election")
	}
	cp.mu.Lock()
	if cp.leaseClient == nil {
		cp.leaseClient = cp.Client(AdminUser)
	}
	client := cp.leaseClient
	cp.mu.Unlock()
	l, err := client.CoordinationV1().Leases(cp.lease.LeaseNamespace).Get(ctx, cp.lease.LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return -1, nil, nil
	}
	if err != nil {
		return -1, nil, fmt.Errorf("reading lease %s/%s: %w", cp.lease.LeaseNamespace, cp.lease.LeaseName, err)
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return -1, l, nil
	}
	for i, r := range cp.schedulers {
		if leader.Ours(*l.Spec.HolderIdentity, r.host) {
			return i, l, nil
		}
	}
	return -1, l, nil
}
