package isolation

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Request is the --isolation flag: a Mode, or Auto.
type Request string

// Requests.
const (
	// RequestAuto picks, card by card, the strongest mode the card
	// supports; the others ask one mode of every card.
	RequestAuto   Request = "auto"
	RequestDriver Request = Request(gpushare.IsolationDriver)
	RequestMPS    Request = Request(gpushare.IsolationMPS)
	RequestNone   Request = Request(gpushare.IsolationNone)
)

// Requests lists the values of --isolation, the default first.
var Requests = []Request{RequestAuto, RequestDriver, RequestMPS, RequestNone}

// ParseRequest checks a --isolation value.
func ParseRequest(s string) (Request, error) {
	for _, r := range Requests {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("--isolation %q: want one of auto, driver, mps, none", s)
}

// MinDriverMajor and MinDriverMinor: the first driver that limits device
// memory per cgroup, R615 with CUDA 13.4.
const (
	MinDriverMajor = 615
	MinDriverMinor = 0
)

// Capabilities are what a node supports that the modes need.
type Capabilities struct {
	// Driver is the NVIDIA driver; DriverErr says why it is unknown.
	Driver    gpu.Driver
	DriverErr error
	// CgroupV2 is true on a node with the unified cgroup hierarchy;
	// CgroupErr says why it is unknown.
	CgroupV2  bool
	CgroupErr error
	// MPSControl is the MPS control binary's path; MPSControlErr says why
	// it cannot be run, such as not found or not executable.
	MPSControl    string
	MPSControlErr error
	// ComputeModeLocked: the plugin lacks CAP_SYS_ADMIN and may not change
	// a card's compute mode. mps then takes only cards an operator set to
	// EXCLUSIVE_PROCESS. Detect leaves it false; the caller checks the
	// process with SysAdmin.
	ComputeModeLocked bool
	// MPSShmErr says why an MPS server the plugin starts would not share
	// /dev/shm with its clients, from CheckMPSShm; nil when it would.
	// Detect leaves it nil; the caller checks the host.
	MPSShmErr error
	// RuntimeCDIErr says why the node's container runtime would not apply
	// the CDI devices that carry driver mode's limits: an ErrRuntimeNoCDI
	// from RuntimeAppliesCDI, nil when it would. Detect leaves it nil; the
	// caller checks the runtime.
	RuntimeCDIErr error
	// Cards in index order.
	Cards []CardCapabilities
}

// CardCapabilities are one card's features.
type CardCapabilities struct {
	Index int
	UUID  string
	// Features; Err says why they are unknown, and the card then gets no
	// mode but none.
	Features gpu.Features
	Err      error
}

// Host is what Detect reads from the GPUs; gpu.NVML and gpu.Fake implement
// it.
type Host interface {
	Driver() (gpu.Driver, error)
	Features(uuid string) (gpu.Features, error)
}

var (
	_ Host = (*gpu.NVML)(nil)
	_ Host = (*gpu.Fake)(nil)
)

// Detect reads the capabilities of a node with these cards: the driver
// from host, cgroup v2 from cg, the MPS control binary at mpsControl by
// LookPath's rules, and each card's features. Nothing it reads is fatal:
// what cannot be read counts as unsupported, with the reason kept.
func Detect(host Host, cg Cgroups, lookPath func(string) (string, error), mpsControl string, devs []gpu.Device) Capabilities {
	var c Capabilities
	c.Driver, c.DriverErr = host.Driver()
	c.CgroupV2, c.CgroupErr = cg.Unified()
	if p, err := lookPath(mpsControl); err != nil {
		c.MPSControlErr = err
	} else {
		c.MPSControl = p
	}
	for _, d := range devs {
		f, err := host.Features(d.UUID)
		c.Cards = append(c.Cards, CardCapabilities{Index: d.Index, UUID: d.UUID, Features: f, Err: err})
	}
	return c
}

// driverOK reports whether v is at least MinDriverMajor.MinDriverMinor.
func driverOK(v string) bool {
	fields := strings.Split(v, ".")
	if len(fields) < 2 {
		return false
	}
	major, err1 := strconv.Atoi(fields[0])
	minor, err2 := strconv.Atoi(fields[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return major > MinDriverMajor || major == MinDriverMajor && minor >= MinDriverMinor
}

// nodeMissing returns what the node as a whole lacks for mode m; nil when
// nothing.
func (c *Capabilities) nodeMissing(m gpushare.Isolation) []string {
	var out []string
	switch m {
	case gpushare.IsolationDriver:
		switch {
		case c.DriverErr != nil:
			out = append(out, fmt.Sprintf("driver version unknown (%v)", c.DriverErr))
		case !driverOK(c.Driver.Version):
			out = append(out, fmt.Sprintf("driver %s < %d.%02d required", c.Driver.Version, MinDriverMajor, MinDriverMinor))
		}
		switch {
		case c.CgroupErr != nil:
			out = append(out, fmt.Sprintf("cgroup version unknown (%v)", c.CgroupErr))
		case !c.CgroupV2:
			out = append(out, "cgroup v1 (v2 required)")
		}
		if c.RuntimeCDIErr != nil {
			out = append(out, c.RuntimeCDIErr.Error())
		}
	case gpushare.IsolationMPS:
		if c.DriverErr != nil {
			out = append(out, fmt.Sprintf("driver unknown (%v)", c.DriverErr))
		}
		if c.MPSControlErr != nil {
			out = append(out, fmt.Sprintf("MPS control binary: %v", c.MPSControlErr))
		}
		if c.MPSShmErr != nil {
			out = append(out, fmt.Sprintf("MPS shared memory: %v", c.MPSShmErr))
		}
	}
	return out
}

// cardMissing returns what card k of c lacks for mode m; nil when nothing.
func (c *Capabilities) cardMissing(k *CardCapabilities, m gpushare.Isolation) []string {
	if m == gpushare.IsolationNone {
		return nil
	}
	if k.Err != nil {
		return []string{fmt.Sprintf("GPU %d features unknown (%v)", k.Index, k.Err)}
	}
	var out []string
	if k.Features.MIG {
		out = append(out, fmt.Sprintf("GPU %d has MIG on", k.Index))
	}
	if m == gpushare.IsolationMPS {
		if !k.Features.MPS {
			out = append(out, fmt.Sprintf("GPU %d older than Volta (compute capability < 7.0)", k.Index))
		}
		switch cm := k.Features.ComputeMode; {
		case cm == gpu.ComputeProhibited:
			out = append(out, fmt.Sprintf("GPU %d compute mode Prohibited", k.Index))
		case cm != gpu.ComputeExclusiveProcess && c.ComputeModeLocked:
			out = append(out, fmt.Sprintf("GPU %d compute mode %s and no CAP_SYS_ADMIN to set EXCLUSIVE_PROCESS (run nvidia-smi -i %d -c EXCLUSIVE_PROCESS, or grant the plugin CAP_SYS_ADMIN)",
				k.Index, cm, k.Index))
		}
	}
	return out
}

// strongestFirst orders the enforcing modes, strongest first.
var strongestFirst = []gpushare.Isolation{gpushare.IsolationDriver, gpushare.IsolationMPS}

// Choose returns the mode of every card of c for request r, parallel to
// c.Cards. RequestAuto gives each card the strongest mode it supports:
// driver, then mps, then none. An explicit mode must be supported by every
// card, or Choose fails naming what is missing, e.g.
// "isolation driver: driver 550.54.15 < 615.00 required; cgroup v1 (v2 required)".
func Choose(r Request, c *Capabilities) ([]gpushare.Isolation, error) {
	modes := make([]gpushare.Isolation, len(c.Cards))
	switch r {
	case RequestNone:
		for i := range modes {
			modes[i] = gpushare.IsolationNone
		}
		return modes, nil
	case RequestAuto:
		node := map[gpushare.Isolation]bool{}
		for _, m := range strongestFirst {
			node[m] = len(c.nodeMissing(m)) == 0
		}
		for i := range c.Cards {
			modes[i] = gpushare.IsolationNone
			for _, m := range strongestFirst {
				if node[m] && len(c.cardMissing(&c.Cards[i], m)) == 0 {
					modes[i] = m
					break
				}
			}
		}
		return modes, nil
	}
	m := gpushare.Isolation(r)
	missing := c.nodeMissing(m)
	for i := range c.Cards {
		missing = append(missing, c.cardMissing(&c.Cards[i], m)...)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("isolation %s: %s", m, strings.Join(missing, "; "))
	}
	for i := range modes {
		modes[i] = m
	}
	return modes, nil
}

// WhyNot returns what keeps card i of c from each mode stronger than the
// one it got, for the startup log: "driver: driver 550.54.15 < 615.00
// required; mps: GPU 0 has MIG on". Empty when it got the strongest.
func WhyNot(c *Capabilities, i int, got gpushare.Isolation) string {
	var parts []string
	for _, m := range strongestFirst {
		if m == got {
			break
		}
		missing := append(c.nodeMissing(m), c.cardMissing(&c.Cards[i], m)...)
		parts = append(parts, string(m)+": "+strings.Join(missing, ", "))
	}
	return strings.Join(parts, "; ")
}
