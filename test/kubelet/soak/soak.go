package soak

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/test/kubelet/cluster"
)

// Config configures a run.
type Config struct {
	// Seed draws every decision; the run prints it.
	Seed uint64
	// Duration is how long faults are injected; the run goes on past it
	// until MinFaults have been injected, up to 3×Duration.
	Duration time.Duration
	// MinFaults is the fewest faults a run injects.
	MinFaults int
	// MaxFaultGap bounds the quiet time after each fault (with Overlap
	// above 1, between the beginnings of two faults).
	MaxFaultGap time.Duration
	// Overlap is how many faults may be in flight together; 0 is 2.
	Overlap int
	// CheckPeriod is how often the continuous invariants are checked.
	CheckPeriod time.Duration
	// InspectBound is how long the extender's inspect may differ from the
	// API's recomputation before it is a violation.
	InspectBound time.Duration
	// PendingBound is how long after the last fault every pod must run
	// or have failed with a reason.
	PendingBound time.Duration
	// Namespace of the workload's pods.
	Namespace string
	// MaxPods bounds the live pods; MaxUnitsPercent bounds what they ask,
	// in percent of the nodes' GPU memory, so that all fit at the end.
	MaxPods         int
	MaxUnitsPercent int64
	// MaxTwoCardPods bounds the live pods split over two cards (see
	// Bounds.TwoCard); 0 is a quarter of the nodes' cards, negative no
	// bound.
	MaxTwoCardPods int
	// MaxOpWait bounds the pause between two workload steps.
	MaxOpWait time.Duration
	// Out gets the run's lines.
	Out io.Writer
}

// Defaults fills the zero fields of cfg with the short soak's values.
func (cfg *Config) Defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&cfg.Duration, 60*time.Second)
	set(&cfg.MaxFaultGap, 1500*time.Millisecond)
	set(&cfg.CheckPeriod, 3*time.Second)
	set(&cfg.InspectBound, 30*time.Second)
	set(&cfg.PendingBound, 3*time.Minute)
	set(&cfg.MaxOpWait, 600*time.Millisecond)
	if cfg.MinFaults <= 0 {
		cfg.MinFaults = 20
	}
	if cfg.Overlap <= 0 {
		cfg.Overlap = 2
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "soak"
	}
	if cfg.MaxPods <= 0 {
		cfg.MaxPods = 40
	}
	if cfg.MaxUnitsPercent <= 0 {
		cfg.MaxUnitsPercent = 40
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
}

// requestTimeout bounds one API request of the workload.
const requestTimeout = 10 * time.Second

// Run runs the soak on c: it prints the seed, runs the workload, the
// injector and the checker together for cfg.Duration, lets the pods settle,
// checks everything once more, deletes the pods, and prints the faults by
// kind, the invariants and the summary line. The error is for a run that
// could not be carried out; violations are in the summary.
func Run(ctx context.Context, c *cluster.Cluster, cfg Config) (Summary, []string, error) {
	cfg.Defaults()
	log := newPrinter(cfg.Out)
	var capacity int64
	cards := 0
	for _, n := range c.Nodes() {
		capacity += n.TotalGiB()
		cards += len(n.Cards)
	}
	bounds := Bounds{Pods: cfg.MaxPods, Units: capacity * cfg.MaxUnitsPercent / 100, TwoCard: cfg.MaxTwoCardPods}
	if bounds.TwoCard == 0 {
		bounds.TwoCard = cards / 4
	}
	log.printf("soak starting with seed %d: duration=%s min-faults=%d overlap=%d nodes=%d (%d GiB, %d cards); %d kube-scheduler and %d extender replicas; live pods: at most %d, asking at most %d GiB, at most %d split over two cards (negative: unbounded)",
		cfg.Seed, cfg.Duration, cfg.MinFaults, cfg.Overlap, len(c.Nodes()), capacity, cards, c.CP.SchedulerReplicas(), c.ExtenderReplicas(), bounds.Pods, bounds.Units, bounds.TwoCard)
	if err := c.CP.CreateNamespace(ctx, cfg.Namespace); err != nil {
		return Summary{}, nil, err
	}
	vs := NewViolations(log)
	targets := ClusterTargets(c)
	inj := NewInjector(targets, NewPlanner(cfg.Seed, targets, cfg.MaxFaultGap), cfg.Overlap, log, vs)
	wl := NewWorkload(cfg.Seed, cfg.Namespace, bounds, cfg.MaxOpWait)
	checker := NewChecker(c, vs, log, cfg.InspectBound)
	defer checker.Close()

	var wg sync.WaitGroup
	checkCtx, stopChecks := context.WithCancel(ctx)
	defer stopChecks()
	wg.Add(1)
	go func() {
		defer wg.Done()
		checker.Run(checkCtx, cfg.CheckPeriod)
	}()
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var workDone sync.WaitGroup
	workDone.Add(1)
	go func() {
		defer workDone.Done()
		drive(workCtx, c, wl, cfg.Namespace, log)
	}()

	begin := time.Now()
	inj.Run(ctx, func(faults int) bool {
		elapsed := time.Since(begin)
		return elapsed < cfg.Duration || (faults < cfg.MinFaults && elapsed < 3*cfg.Duration)
	})
	stopWork()
	workDone.Wait()
	faults, total := inj.Counts()
	last := inj.Healed()
	log.printf("chaos over after %.1fs: %d faults, %d begun while another was in flight; the workload created %d pods; waiting for every pod to run or fail with a reason (bound %s)",
		time.Since(begin).Seconds(), total, inj.Overlapped(), wl.Created(), cfg.PendingBound)

	settle(ctx, c, cfg, last, vs, log)
	stopChecks()
	wg.Wait()
	final(ctx, c, cfg, checker, vs, log)
	outcomes(ctx, c, cfg.Namespace, vs, log)
	released(ctx, c, cfg, vs, log)
	if ctx.Err() != nil {
		return Summary{}, nil, fmt.Errorf("soak interrupted: %w", ctx.Err())
	}
	log.printf("checks: %d continuous rounds (%d skipped while the API did not answer)", checker.rounds, checker.skipped)
	if ns, name := c.CP.SchedulerLease(); name != "" {
		if l, err := c.Admin.CoordinationV1().Leases(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			holder, transitions := "nobody", int32(0)
			if l.Spec.HolderIdentity != nil {
				holder = *l.Spec.HolderIdentity
			}
			if l.Spec.LeaseTransitions != nil {
				transitions = *l.Spec.LeaseTransitions
			}
			log.printf("lease %s/%s: held by %s after %d transitions", ns, name, holder, transitions)
		}
	}
	writeTables(cfg.Out, faults, inj.LeaderKills(), vs)
	s := Summary{Seed: cfg.Seed, Faults: faults, Pods: wl.Created(), Violations: vs.Count(), Overlapped: inj.Overlapped()}
	fmt.Fprintln(cfg.Out, s.Line())
	if total < cfg.MinFaults {
		return s, vs.List(), fmt.Errorf("only %d faults injected in %s, want at least %d", total, 3*cfg.Duration, cfg.MinFaults)
	}
	return s, vs.List(), nil
}

// drive applies the workload's steps until ctx ends.
func drive(ctx context.Context, c *cluster.Cluster, wl *Workload, ns string, log *printer) {
	pods := c.Admin.CoreV1().Pods(ns)
	for ctx.Err() == nil {
		op := wl.Next()
		switch {
		case op.Create != nil:
			err := retry(ctx, func(ctx context.Context) error {
				_, err := pods.Create(ctx, op.Create, metav1.CreateOptions{})
				if apierrors.IsAlreadyExists(err) {
					return nil // an earlier try got through
				}
				return err
			})
			if err != nil {
				log.printf("workload: creating pod %s: %v", op.Create.Name, err)
			}
		case op.Delete != "":
			err := retry(ctx, func(ctx context.Context) error {
				err := pods.Delete(ctx, op.Delete, metav1.DeleteOptions{})
				if apierrors.IsNotFound(err) {
					return nil
				}
				return err
			})
			if err != nil {
				log.printf("workload: deleting pod %s: %v", op.Delete, err)
			}
		}
		sleep(ctx, op.Wait)
	}
}

// retry calls f, each call bounded by requestTimeout, until it succeeds,
// ctx ends or a minute has passed (the API server is paused for seconds
// at a time).
func retry(ctx context.Context, f func(context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
		err := f(rctx)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// settle waits until every pod of the namespace runs admitted or has
// failed, and none is terminating, up to cfg.PendingBound after the last
// fault; it records each pod still waiting then.
func settle(ctx context.Context, c *cluster.Cluster, cfg Config, last time.Time, vs *Violations, log *printer) {
	vs.Checked(InvPending)
	deadline := last.Add(cfg.PendingBound)
	var waiting []string
	for {
		waiting = waiting[:0]
		list, err := c.Admin.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			for i := range list.Items {
				if w := waitingFor(&list.Items[i]); w != "" {
					waiting = append(waiting, w)
				}
			}
			if len(waiting) == 0 {
				log.printf("every pod runs or has failed with a reason %.1fs after the last fault (bound %s)", time.Since(last).Seconds(), cfg.PendingBound)
				return
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, time.Second)
	}
	sort.Strings(waiting)
	for _, w := range waiting {
		vs.Add(InvPending, fmt.Sprintf("%s %.0fs after the last fault (bound %s)", w, time.Since(last).Seconds(), cfg.PendingBound))
	}
}

// waitingFor says what pod still waits for; "" when it runs admitted or
// has failed.
func waitingFor(p *corev1.Pod) string {
	ref := p.Namespace + "/" + p.Name
	switch {
	case p.DeletionTimestamp != nil:
		return fmt.Sprintf("pod %s still terminating on %q", ref, p.Spec.NodeName)
	case p.Status.Phase == corev1.PodFailed || cluster.Admitted(p):
		return ""
	case p.Spec.NodeName == "":
		msg := "not scheduled"
		if m, ok := cluster.Unschedulable(p); ok {
			msg = "unschedulable: " + m
		}
		return fmt.Sprintf("pod %s pending (%s)", ref, msg)
	default:
		return fmt.Sprintf("pod %s bound to %s, not admitted (phase %q)", ref, p.Spec.NodeName, p.Status.Phase)
	}
}

// final checks the continuous invariants once more on the settled
// cluster, giving the extender's inspect up to cfg.InspectBound to agree
// and every card as long to be healthy and allocatable again.
func final(ctx context.Context, c *cluster.Cluster, cfg Config, checker *Checker, vs *Violations, log *printer) {
	total := map[string]int64{} // node -> GiB
	for _, n := range c.Nodes() {
		total[n.Spec.Name] = n.TotalGiB()
	}
	vs.Checked(InvRecover)
	for _, err := range c.Exited() {
		vs.Add(InvRecover, fmt.Sprintf("at the end, a process is not running: %v", err))
	}
	deadline := time.Now().Add(cfg.InspectBound)
	for {
		diffs, url, ok := checker.Once(ctx)
		var sick []string
		nodes, err := c.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			sick = []string{fmt.Sprintf("listing the nodes: %v", err)}
		} else {
			sick = CheckRecovered(nodes.Items, total)
		}
		if ok && len(diffs) == 0 && len(sick) == 0 {
			log.printf("final check: every card healthy and allocatable; cards, environments, kubelet's devices and the extender's inspect agree with the API")
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if !ok {
				vs.Add(InvInspect, fmt.Sprintf("the leading extender's inspect (%s) could not be read at the end", url))
			}
			for _, d := range diffs {
				vs.Add(InvInspect, "at the end, "+d)
			}
			for _, s := range sick {
				vs.Add(InvRecover, fmt.Sprintf("%s %s after the checks began", s, cfg.InspectBound))
			}
			return
		}
		sleep(ctx, time.Second)
	}
}

// outcomes checks that every pod of the namespace runs admitted or has
// failed with a reason and an event saying it, and prints the failures by
// reason.
func outcomes(ctx context.Context, c *cluster.Cluster, ns string, vs *Violations, log *printer) {
	vs.Checked(InvOutcome)
	list, err := c.Admin.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		vs.Add(InvOutcome, fmt.Sprintf("listing the pods of %s at the end: %v", ns, err))
		return
	}
	running, failed := 0, map[string]int{} // reason -> pods
	for i := range list.Items {
		p := &list.Items[i]
		switch {
		case cluster.Admitted(p):
			running++
		case p.Status.Phase == corev1.PodFailed:
			failed[p.Status.Reason]++
			if err := failureEvent(ctx, c, p); err != nil {
				vs.Add(InvOutcome, err.Error())
			}
		default:
			vs.Add(InvOutcome, fmt.Sprintf("pod %s/%s neither runs nor failed: %s", p.Namespace, p.Name, waitingFor(p)))
		}
	}
	var parts []string
	for _, r := range sortedKeys(failed) {
		parts = append(parts, fmt.Sprintf("%s: %d", r, failed[r]))
	}
	log.printf("at the end: %d pods run admitted, failed with a reason: {%s}", running, strings.Join(parts, ", "))
}

// failureEvent returns an error unless failed pod p has a reason and a
// Warning event with that reason.
func failureEvent(ctx context.Context, c *cluster.Cluster, p *corev1.Pod) error {
	ref := p.Namespace + "/" + p.Name
	if p.Status.Reason == "" {
		return fmt.Errorf("pod %s failed without a reason: %q", ref, p.Status.Message)
	}
	evs, err := c.Admin.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
		"involvedObject.name": p.Name, "involvedObject.uid": string(p.UID), "reason": p.Status.Reason,
	}.String()})
	if err != nil {
		return fmt.Errorf("listing the events of failed pod %s: %w", ref, err)
	}
	if len(evs.Items) == 0 {
		return fmt.Errorf("pod %s failed with reason %s and no event says it", ref, p.Status.Reason)
	}
	return nil
}

// released deletes every pod of the namespace, waits until they are gone,
// and checks that the extender's inspect then shows none of them holding
// memory within cfg.InspectBound (a cache that keeps deleted pods' memory
// is a leak).
func released(ctx context.Context, c *cluster.Cluster, cfg Config, vs *Violations, log *printer) {
	vs.Checked(InvReleased)
	pods := c.Admin.CoreV1().Pods(cfg.Namespace)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		vs.Add(InvReleased, fmt.Sprintf("deleting the pods of %s: %v", cfg.Namespace, err))
		return
	}
	begin := time.Now()
	deadline := begin.Add(cfg.PendingBound)
	for {
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			n := -1
			if err == nil {
				n = len(list.Items)
			}
			vs.Add(InvReleased, fmt.Sprintf("%d pods of %s still there %s after they were deleted", n, cfg.Namespace, cfg.PendingBound))
			return
		}
		sleep(ctx, 500*time.Millisecond)
	}
	gone := time.Since(begin)
	deadline = time.Now().Add(cfg.InspectBound)
	client := &http.Client{Timeout: checkTimeout}
	var held []string
	for {
		var views []inspectapi.Node
		url, err := leaderURL(ctx, c)
		if err == nil {
			views, err = readInspect(ctx, client, url)
		}
		held = held[:0]
		if err == nil {
			for _, n := range views {
				for _, card := range n.Cards {
					for _, p := range card.Pods {
						if p.Namespace == cfg.Namespace {
							held = append(held, fmt.Sprintf("node %s card %d: %s/%s=%d", n.Name, card.Index, p.Namespace, p.Name, p.Units))
						}
					}
				}
			}
			if len(held) == 0 {
				log.printf("every pod deleted in %.1fs; the extender holds nothing of %s", gone.Seconds(), cfg.Namespace)
				return
			}
		} else {
			held = append(held, err.Error())
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		sleep(ctx, 500*time.Millisecond)
	}
	for _, h := range held {
		vs.Add(InvReleased, fmt.Sprintf("%s %s after every pod was deleted", h, cfg.InspectBound))
	}
}
