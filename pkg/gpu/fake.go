package gpu

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// Limits of a --fake-gpus spec, so a typo cannot ask for a million cards.
const (
	maxFakeCardsPerEntry = 64
	maxFakeCards         = 128
	maxFakeMemoryMiB     = 1 << 20 // 1 TiB
)

// ErrFakeSpec marks a malformed --fake-gpus value.
var ErrFakeSpec = errors.New("invalid --fake-gpus")

// ParseFakeGPUs parses a --fake-gpus value: comma-separated entries
// COUNTxMODEL:MEMORY[:mig]. COUNT is 1..64. MODEL is letters, digits and
// "-_.". MEMORY is a positive whole number followed by GiB or MiB. ":mig"
// says the cards have MIG mode on. Cards are numbered in the order given.
// Each gets a UUID derived from its index and from seed, the node name, so
// that fake nodes differ. Example:
//
//	"2xTesla-T4:16GiB,1xA100-SXM4:80GiB:mig" → index 0 and 1 Tesla-T4
//	with 16384 MiB each, index 2 A100-SXM4 with 81920 MiB and MIG on.
func ParseFakeGPUs(spec, seed string) ([]Device, error) {
	if spec == "" {
		return nil, fmt.Errorf("%w: empty; want e.g. 2xTesla-T4:16GiB,1xA100-SXM4:80GiB", ErrFakeSpec)
	}
	var out []Device
	for _, entry := range strings.Split(spec, ",") {
		mig := false
		if e, ok := strings.CutSuffix(entry, ":mig"); ok {
			entry, mig = e, true
		}
		count, model, mem, err := parseFakeEntry(entry)
		if err != nil {
			return nil, err
		}
		if len(out)+count > maxFakeCards {
			return nil, fmt.Errorf("%w: more than %d cards", ErrFakeSpec, maxFakeCards)
		}
		for i := 0; i < count; i++ {
			idx := len(out)
			out = append(out, Device{Card: gpushare.Card{Index: idx, UUID: FakeUUID(seed, idx), Model: model, MemoryMiB: mem}, MIG: mig})
		}
	}
	return out, nil
}

func parseFakeEntry(entry string) (count int, model string, memMiB int64, err error) {
	bad := func(why string) error {
		return fmt.Errorf("%w: entry %q %s; want COUNTxMODEL:MEMORY, e.g. 2xTesla-T4:16GiB", ErrFakeSpec, entry, why)
	}
	countStr, rest, ok := strings.Cut(entry, "x")
	if !ok {
		return 0, "", 0, bad("has no 'x' after the count")
	}
	if !allDigits(countStr) {
		return 0, "", 0, bad("does not start with a count")
	}
	count, err = strconv.Atoi(countStr)
	if err != nil || count < 1 || count > maxFakeCardsPerEntry {
		return 0, "", 0, bad(fmt.Sprintf("has count %s, want 1..%d", countStr, maxFakeCardsPerEntry))
	}
	model, memStr, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, "", 0, bad("has no ':' before the memory")
	}
	if model == "" {
		return 0, "", 0, bad("has no model")
	}
	for _, r := range model {
		if !modelRune(r) {
			return 0, "", 0, bad(fmt.Sprintf("has %q in the model; use letters, digits and -_.", r))
		}
	}
	var perUnit int64
	var num string
	switch {
	case strings.HasSuffix(memStr, "GiB"):
		perUnit, num = 1024, strings.TrimSuffix(memStr, "GiB")
	case strings.HasSuffix(memStr, "MiB"):
		perUnit, num = 1, strings.TrimSuffix(memStr, "MiB")
	default:
		return 0, "", 0, bad("has memory without GiB or MiB")
	}
	if !allDigits(num) {
		return 0, "", 0, bad("has no whole number of memory")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 1 || n > maxFakeMemoryMiB/perUnit {
		return 0, "", 0, bad(fmt.Sprintf("has memory %s, want 1 MiB..1 TiB", memStr))
	}
	return count, model, n * perUnit, nil
}

func modelRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// FakeUUID returns a stable, well-formed UUID for fake card index of seed.
func FakeUUID(seed string, index int) string {
	b := sha256.Sum256([]byte(seed + "/" + strconv.Itoa(index)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Fake is a GPU host without GPUs: cards from a spec, XID events and probe
// failures injected by tests or demos.
type Fake struct {
	devices []Device
	events  chan Event
	// driver is what the fake node's driver supports (SetDriver).
	driver FakeDriver

	mu sync.Mutex
	// probeErr: UUID -> the error Probe returns for it (absent: healthy).
	probeErr map[string]error
	// computeMode: UUID -> the compute mode last set (absent: default).
	computeMode map[string]ComputeMode
}

// NewFake returns a fake host with these cards and no driver: it supports
// no memory isolation until SetDriver says otherwise.
func NewFake(devices []Device) *Fake {
	return &Fake{devices: devices, events: make(chan Event, 64), probeErr: map[string]error{}, computeMode: map[string]ComputeMode{}}
}

// OpenFake returns a fake host with the cards of spec, read by
// ParseFakeGPUs with UUIDs seeded by seed, e.g. the node's name. Its driver
// is driverSpec's, read by ParseFakeDriver.
func OpenFake(spec, driverSpec, seed string) (*Fake, error) {
	devs, err := ParseFakeGPUs(spec, seed)
	if err != nil {
		return nil, err
	}
	drv, err := ParseFakeDriver(driverSpec)
	if err != nil {
		return nil, err
	}
	f := NewFake(devs)
	f.SetDriver(drv)
	return f, nil
}

// SetDriver states what the fake node's driver supports. Call it before
// the fake is used.
func (f *Fake) SetDriver(d FakeDriver) { f.driver = d }

// Driver returns the fake driver, or an error wrapping ErrNoDriver when
// none was stated.
func (f *Fake) Driver() (Driver, error) {
	if f.driver.Version == "" {
		return Driver{}, fmt.Errorf("fake node states no driver (--fake-driver): %w", ErrNoDriver)
	}
	return f.driver.Driver, nil
}

// Features returns the card's MIG mode from the spec, MPS support from the
// fake driver, and the compute mode last set.
func (f *Fake) Features(uuid string) (Features, error) {
	for _, d := range f.devices {
		if d.UUID == uuid {
			f.mu.Lock()
			defer f.mu.Unlock()
			return Features{MIG: d.MIG, MPS: f.driver.MPS, ComputeMode: f.computeMode[uuid]}, nil
		}
	}
	return Features{}, fmt.Errorf("looking up GPU %s: no such fake card", uuid)
}

// SetComputeMode records the card's compute mode.
func (f *Fake) SetComputeMode(uuid string, m ComputeMode) error {
	if _, err := f.Features(uuid); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.computeMode[uuid] = m
	return nil
}

// CgroupV1 reports whether the fake node states cgroup v1.
func (f *Fake) CgroupV1() bool { return f.driver.CgroupV1 }

// Devices returns the cards.
func (f *Fake) Devices() ([]Device, error) { return append([]Device(nil), f.devices...), nil }

// Probe returns the error set by SetProbeError, or nil.
func (f *Fake) Probe(uuid string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.probeErr[uuid]
}

// SetProbeError makes Probe(uuid) fail with err; nil makes it succeed
// again.
func (f *Fake) SetProbeError(uuid string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.probeErr, uuid)
	} else {
		f.probeErr[uuid] = err
	}
}

// InjectXID delivers an XID event to the running watch (or the next one).
func (f *Fake) InjectXID(uuid string, xid uint64) { f.events <- Event{UUID: uuid, XID: xid} }

// WatchXIDs forwards injected events to out until ctx ends.
func (f *Fake) WatchXIDs(ctx context.Context, out chan<- Event) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-f.events:
			select {
			case out <- e:
			case <-ctx.Done():
				return nil
			}
		}
	}
}
