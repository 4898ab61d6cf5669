package isolation

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Environment every mode sets, in the forms frameworks read
// (docs/memory-isolation.md).
const (
	// EnvIsolation is the container's mode: driver, mps or none.
	EnvIsolation = "GPUSHARE_ISOLATION"
	// EnvMemoryLimitMiB is the container's share in MiB, one value per card
	// in NVIDIA_VISIBLE_DEVICES order, separated by commas.
	EnvMemoryLimitMiB = "GPUSHARE_MEMORY_LIMIT_MIB"
	// EnvMemoryFraction is the share as a fraction of each card's memory,
	// rounded down to 4 decimals, e.g. "0.25". It is for
	// torch.cuda.set_per_process_memory_fraction and TensorFlow's
	// per_process_gpu_memory_fraction.
	EnvMemoryFraction = "GPUSHARE_MEMORY_FRACTION"
)

// Card is a card as the enforcer needs it.
type Card struct {
	gpushare.Card
	// Mode is the card's isolation, from Choose.
	Mode gpushare.Isolation
}

// Share is a container's part of one card.
type Share struct {
	UUID string
	// MiB of the card the container may use.
	MiB int64
}

// Mount is a host directory a container gets.
type Mount struct {
	HostPath, ContainerPath string
	// ReadOnly: the container may not write it.
	ReadOnly bool
}

// Edits are what a container's Allocate response gets from its mode.
type Edits struct {
	// Mode the container runs under: the weakest of its cards'.
	Mode gpushare.Isolation
	Env  map[string]string
	// Mounts to add, in mps mode.
	Mounts []Mount
	// CDIDevices are qualified CDI device names to add, in driver mode.
	CDIDevices []string
}

// Enforcer turns a container's shares into its edits, by its cards' modes.
type Enforcer struct {
	// cards: UUID -> card.
	cards map[string]Card
	// cdi is driver mode's spec; nil when no card is in driver mode.
	cdi *CDISpec
	// mps is the MPS manager; nil when no card is in mps mode.
	mps *MPS
}

// NewEnforcer returns an enforcer for cards; cdi must be set if a card is
// in driver mode, mps if one is in mps mode.
func NewEnforcer(cards []Card, cdi *CDISpec, mps *MPS) (*Enforcer, error) {
	e := &Enforcer{cards: map[string]Card{}, cdi: cdi, mps: mps}
	for _, c := range cards {
		switch {
		case c.Mode == gpushare.IsolationDriver && cdi == nil:
			return nil, fmt.Errorf("GPU %d is in driver mode without a CDI spec", c.Index)
		case c.Mode == gpushare.IsolationMPS && mps == nil:
			return nil, fmt.Errorf("GPU %d is in mps mode without an MPS manager", c.Index)
		}
		e.cards[c.UUID] = c
	}
	return e, nil
}

// rank orders modes, weakest first.
func rank(m gpushare.Isolation) int {
	switch m {
	case gpushare.IsolationDriver:
		return 2
	case gpushare.IsolationMPS:
		return 1
	}
	return 0
}

// Edits returns the edits of a container with shares, in its card order.
// The container runs under the weakest mode of its cards. An mps container
// on more than one card runs under none: each MPS daemon serves one card,
// and a client talks to one daemon. For an mps container it starts the
// card's daemon if needed.
func (e *Enforcer) Edits(ctx context.Context, shares []Share) (*Edits, error) {
	if len(shares) == 0 {
		return nil, fmt.Errorf("computing isolation edits: no cards")
	}
	mode := gpushare.IsolationDriver
	mibs := make([]string, len(shares))
	fracs := make([]string, len(shares))
	limits := make([]Limit, len(shares))
	for i, sh := range shares {
		c, ok := e.cards[sh.UUID]
		if !ok {
			return nil, fmt.Errorf("computing isolation edits: unknown GPU %s", sh.UUID)
		}
		if rank(c.Mode) < rank(mode) {
			mode = c.Mode
		}
		mibs[i] = strconv.FormatInt(sh.MiB, 10)
		fracs[i] = fraction(sh.MiB, c.MemoryMiB)
		limits[i] = Limit{Index: c.Index, MiB: sh.MiB}
	}
	if mode == gpushare.IsolationMPS && len(shares) > 1 {
		klog.FromContext(ctx).Info("A container on several MPS cards runs without memory enforcement: each MPS daemon serves one card", "cards", len(shares))
		mode = gpushare.IsolationNone
	}
	ed := &Edits{Mode: mode, Env: map[string]string{
		EnvIsolation:      string(mode),
		EnvMemoryLimitMiB: strings.Join(mibs, ","),
		EnvMemoryFraction: strings.Join(fracs, ","),
	}}
	switch mode {
	case gpushare.IsolationDriver:
		name, err := e.cdi.Device(limits)
		if err != nil {
			return nil, err
		}
		ed.CDIDevices = []string{name}
	case gpushare.IsolationMPS:
		sh := shares[0]
		if err := e.mps.Ensure(ctx, sh.UUID, sh.MiB); err != nil {
			return nil, err
		}
		pipe, log := e.mps.Dirs(sh.UUID)
		// The log directory is read-only. The card's MPS server, which may
		// run as root, writes its log there. A client that could plant a
		// symlink in it could have the server append to another card's
		// files, such as its desired state.
		ed.Mounts = []Mount{{HostPath: pipe, ContainerPath: ContainerMPSPipeDir}, {HostPath: log, ContainerPath: ContainerMPSLogDir, ReadOnly: true},
			{HostPath: e.mps.ShmDir(), ContainerPath: DevShm}}
		ed.Env[EnvMPSPipeDir] = ContainerMPSPipeDir
		ed.Env[EnvMPSLogDir] = ContainerMPSLogDir
		ed.Env[EnvMPSPinnedLimit] = "0=" + strconv.FormatInt(sh.MiB, 10) + "M"
	}
	return ed, nil
}

// PruneCDI drops driver mode's limit devices that no container in held
// holds, sparing those added within minAge, as CDISpec.Retain does. It
// returns how many it dropped. Without driver mode it does nothing.
func (e *Enforcer) PruneCDI(held [][]Limit, minAge time.Duration) (int, error) {
	if e.cdi == nil {
		return 0, nil
	}
	return e.cdi.Retain(held, minAge)
}

// RetainMPS tells the MPS manager which shares its cards serve now. held is
// each container's shares, in its card order. Only containers on one mps
// card are MPS clients; one on several runs under none. Each card's default
// pinned limit moves to its largest share, sparing shares added within
// minAge, as MPS.Retain does. Without mps mode it does nothing.
func (e *Enforcer) RetainMPS(ctx context.Context, held [][]Share, minAge time.Duration) error {
	if e.mps == nil {
		return nil
	}
	byCard := map[string][]int64{}
	for _, shares := range held {
		if len(shares) != 1 || e.cards[shares[0].UUID].Mode != gpushare.IsolationMPS {
			continue
		}
		byCard[shares[0].UUID] = append(byCard[shares[0].UUID], shares[0].MiB)
	}
	return e.mps.Retain(ctx, byCard, minAge)
}

// fraction returns part/whole rounded down to 4 decimals: 4096 of 16384
// is "0.25", 5000 of 15360 is "0.3255".
func fraction(part, whole int64) string {
	if whole <= 0 {
		return "0"
	}
	tenThousandths := part * 10000 / whole
	s := strconv.FormatInt(tenThousandths/10000, 10) + "." + fmt.Sprintf("%04d", tenThousandths%10000)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}
