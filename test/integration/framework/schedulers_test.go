package framework

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestSchedulerReplicasElectOneLeader: two kube-scheduler replicas, each in
// its own UTS namespace, elect one leader whose identity in the Lease
// starts with its host name; killed, the other takes over, and the
// restarted one comes back as a follower under the same host name. Killed
// and restarted at once, the leader's replica still holds the Lease by
// name, but its new process does not lead (SchedulerLeads) until it or the
// other takes the Lease over.
func TestSchedulerReplicasElectOneLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	cp := StartT(t, Options{Scheduler: true, SchedulerHA: &SchedulerHA{
		Replicas:      []SchedulerReplica{{Host: "scheduler-a"}, {Host: "scheduler-b"}},
		LeaseName:     "ha-test",
		LeaseDuration: 6 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 500 * time.Millisecond,
	}})
	if ns, name := cp.SchedulerLease(); ns != "kube-system" || name != "ha-test" {
		t.Fatalf("lease %s/%s, want kube-system/ha-test", ns, name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	waitLeader := func(not int) (int, string) {
		t.Helper()
		i, holder := -1, ""
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			i, holder, err = cp.SchedulerLeader(ctx)
			return err == nil && i >= 0 && i != not, nil
		})
		if err != nil {
			t.Fatalf("no replica other than %d leads (last holder %q): %v", not, holder, err)
		}
		return i, holder
	}
	first, holder := waitLeader(-1)
	if host := cp.SchedulerHost(first); !strings.HasPrefix(holder, host+"_") {
		t.Fatalf("holder %q of replica %d does not start with its host name %q", holder, first, host)
	}
	if err := cp.KillScheduler(first); err != nil {
		t.Fatal(err)
	}
	if exited := cp.Exited(); len(exited) != 1 || !strings.Contains(exited[0].Error(), cp.SchedulerHost(first)+" exited") {
		t.Errorf("after killing replica %d, Exited() = %v, want it alone", first, exited)
	}
	second, holder := waitLeader(first)
	if host := cp.SchedulerHost(second); !strings.HasPrefix(holder, host+"_") {
		t.Fatalf("holder %q of replica %d does not start with its host name %q", holder, second, host)
	}
	if err := cp.StartScheduler(ctx, first); err != nil {
		t.Fatal(err)
	}
	if exited := cp.Exited(); len(exited) != 0 {
		t.Errorf("after the restart, Exited() = %v, want none", exited)
	}
	if i, holder, err := cp.SchedulerLeader(ctx); err != nil || i != second {
		t.Fatalf("after the restart the leader is replica %d (%q, %v), want %d still", i, holder, err, second)
	}
	if leads, err := cp.SchedulerLeads(ctx, second); err != nil || !leads {
		t.Fatalf("replica %d leads: %v (%v), want true", second, leads, err)
	}

	if err := cp.KillScheduler(second); err != nil {
		t.Fatal(err)
	}
	if err := cp.StartScheduler(ctx, second); err != nil {
		t.Fatal(err)
	}
	i, holder, err := cp.SchedulerLeader(ctx)
	leads, lerr := cp.SchedulerLeads(ctx, second)
	if err != nil || lerr != nil || i != second || leads {
		t.Fatalf("right after replica %d was killed and restarted: leader %d (%q, %v), its new process leads %v (%v); want it named, not leading", second, i, holder, err, leads, lerr)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		a, _ := cp.SchedulerLeads(ctx, 0)
		b, _ := cp.SchedulerLeads(ctx, 1)
		return a != b, nil
	})
	if err != nil {
		t.Fatalf("no replica's running process took the Lease over: %v", err)
	}
}
