package soak

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// Invariant names one property the soak checks.
type Invariant string

// The invariants, in the order the output lists them.
const (
	// InvCards: no card holds more than its size, by the pods'
	// allocation annotations and by kubelet's device IDs as each pod was
	// admitted; no device ID held by two pods (cluster.CheckCards).
	InvCards Invariant = "cards-within-size"
	// InvEnv: every admitted container's environment (what Allocate
	// returned) names the cards of its pod's annotation (cluster.Rows).
	InvEnv Invariant = "env-equals-annotation"
	// InvKubelet: kubelet's PodResources, read live from each node, holds
	// no device ID twice and gives each container of an admitted pod the
	// units per card its annotation says.
	InvKubelet Invariant = "kubelet-devices-equal-annotation"
	// InvInspect: the extender's /inspect equals a recomputation from the
	// API's pods and nodes (a difference may last no longer than a bound).
	InvInspect Invariant = "inspect-equals-api"
	// InvOutcome: at the end every pod runs, or failed with a reason and
	// an event saying it.
	InvOutcome Invariant = "pod-running-or-reason"
	// InvPending: no pod waits longer than a bound after the last fault.
	InvPending Invariant = "pending-bounded-after-faults"
	// InvReleased: once every pod is deleted, the extender holds nothing.
	InvReleased Invariant = "released-after-delete"
	// InvRecover: every fault is healed: a killed component comes back,
	// the paused API server resumes, a card recovers.
	InvRecover Invariant = "components-recover"
)

// Invariants are all invariants.
var Invariants = []Invariant{InvCards, InvEnv, InvKubelet, InvInspect, InvOutcome, InvPending, InvReleased, InvRecover}

// Violations collects what broke, each distinct message once, and how
// often each invariant was checked.
type Violations struct {
	log *printer

	mu sync.Mutex
	// seen: invariant + message -> recorded.
	seen map[string]bool
	// byInv: invariant -> distinct violations.
	byInv map[Invariant]int
	// checks: invariant -> times checked.
	checks map[Invariant]int
	list   []string
}

// NewViolations returns an empty collection that prints each new
// violation to log.
func NewViolations(log *printer) *Violations {
	return &Violations{log: log, seen: map[string]bool{}, byInv: map[Invariant]int{}, checks: map[Invariant]int{}}
}

// Checked counts one check of inv.
func (v *Violations) Checked(inv Invariant) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.checks[inv]++
}

// Add records a violation of inv; the same message again is not counted.
func (v *Violations) Add(inv Invariant, msg string) {
	v.mu.Lock()
	key := string(inv) + "\x00" + msg
	if v.seen[key] {
		v.mu.Unlock()
		return
	}
	v.seen[key] = true
	v.byInv[inv]++
	v.list = append(v.list, fmt.Sprintf("[%s] %s", inv, msg))
	v.mu.Unlock()
	v.log.printf("VIOLATION [%s] %s", inv, msg)
}

// Count is the number of distinct violations.
func (v *Violations) Count() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.list)
}

// List returns the violations in the order found.
func (v *Violations) List() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.list...)
}

// Summary is the outcome of a run.
type Summary struct {
	Seed       uint64
	Faults     map[Kind]int
	Pods       int
	Violations int
	// Overlapped counts the faults begun while another was in flight.
	Overlapped int
}

// Line is the one summary line a run ends with.
func (s Summary) Line() string {
	total, kinds := 0, 0
	for _, n := range s.Faults {
		total += n
		if n > 0 {
			kinds++
		}
	}
	return fmt.Sprintf("soak: seed=%d faults=%d kinds=%d pods=%d violations=%d overlapped=%d", s.Seed, total, kinds, s.Pods, s.Violations, s.Overlapped)
}

// writeTables prints the faults by kind and the invariants with how often
// each was checked and held.
func writeTables(w io.Writer, faults, leaders map[Kind]int, v *Violations) {
	var b strings.Builder
	b.WriteString("faults injected by kind:\n")
	for _, k := range Kinds {
		fmt.Fprintf(&b, "  %-17s %d", k, faults[k])
		if n, ok := leaders[k]; ok {
			fmt.Fprintf(&b, " (%d of the leading replica)", n)
		}
		b.WriteString("\n")
	}
	b.WriteString("invariants:\n")
	v.mu.Lock()
	for _, inv := range Invariants {
		state := "held"
		if n := v.byInv[inv]; n > 0 {
			state = fmt.Sprintf("VIOLATED (%d)", n)
		}
		fmt.Fprintf(&b, "  %-33s checked %4d times, %s\n", inv, v.checks[inv], state)
	}
	v.mu.Unlock()
	_, _ = io.WriteString(w, b.String())
}

// printer writes lines prefixed with the time since the run began.
type printer struct {
	mu    sync.Mutex
	w     io.Writer
	begin time.Time
}

func newPrinter(w io.Writer) *printer { return &printer{w: w, begin: time.Now()} }

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%6.1fs] %s\n", time.Since(p.begin).Seconds(), fmt.Sprintf(format, args...))
}

// sortedKeys returns m's keys, sorted.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
