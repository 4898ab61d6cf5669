package gpushare

import "fmt"

// Isolation is how a card enforces each container's share of its memory:
// the device plugin's --isolation (docs/memory-isolation.md).
type Isolation string

// Isolation modes, strongest first.
const (
	// IsolationDriver: the driver (R615 and newer) limits device memory
	// per container cgroup; the runtime applies it through a CDI hook.
	IsolationDriver Isolation = "driver"
	// IsolationMPS: an MPS server limits each client process's pinned
	// device memory.
	IsolationMPS Isolation = "mps"
	// IsolationNone: the share is advisory, in the environment only. An
	// inventory device without the field is IsolationNone.
	IsolationNone Isolation = "none"
)

// Enforced reports whether the mode enforces a memory limit.
func (m Isolation) Enforced() bool { return m == IsolationDriver || m == IsolationMPS }

// AnnotationIsolation (pod): IsolationEnforced keeps the pod off cards that
// do not enforce memory limits, whose inventory isolation is none or absent.
const AnnotationIsolation = "gpushare.io/isolation"

// IsolationEnforced is the only value of AnnotationIsolation.
const IsolationEnforced = "enforced"

func validIsolation(m Isolation) error {
	switch m {
	case "", IsolationDriver, IsolationMPS, IsolationNone:
		return nil
	}
	return fmt.Errorf("%w: isolation %q, want %s, %s or %s", ErrInvalid, m, IsolationDriver, IsolationMPS, IsolationNone)
}
