package isolation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/gpushare/gpushare/pkg/gpu"
)

// MPS defaults and the paths containers see.
const (
	// DefaultMPSControl is the MPS control binary.
	DefaultMPSControl = "nvidia-cuda-mps-control"
	// DefaultMPSRoot holds one directory per card, named by its UUID, with
	// pipe/ and log/ for that card's daemon.
	DefaultMPSRoot = "/run/gpushare/mps"
	// ContainerMPSPipeDir and ContainerMPSLogDir are where a container
	// finds its card's pipe and log directories. They are CUDA's defaults,
	// so a client finds them even without the environment.
	ContainerMPSPipeDir = "/tmp/nvidia-mps"
	ContainerMPSLogDir  = "/var/log/nvidia-mps"
)

// MPS environment.
const (
	EnvMPSPipeDir = "CUDA_MPS_PIPE_DIRECTORY"
	EnvMPSLogDir  = "CUDA_MPS_LOG_DIRECTORY"
	// EnvMPSPinnedLimit is each client's own limit, "0=<N>M": the
	// container sees its one card as device 0.
	EnvMPSPinnedLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
	envVisibleDevices = "CUDA_VISIBLE_DEVICES"
)

// Files of a card's directory under the MPS root; MPSDaemons lists them.
const (
	mpsDesiredFile = "desired.json"
	mpsStatusFile  = "status.json"
)

// Timing of the daemon supervision.
const (
	// mpsStatusFresh is how recent a card's status must be for the plugin
	// to trust it: the daemons' side rewrites it every Poll.
	mpsStatusFresh = 5 * time.Second
	// mpsCommandTimeout bounds one control command.
	mpsCommandTimeout = 10 * time.Second
	// mpsReadyWait is how long a command is retried while the daemon
	// starts and does not answer yet.
	mpsReadyWait = 5 * time.Second
	// mpsQuitWait is how long a daemon has to exit after "quit".
	mpsQuitWait = 5 * time.Second
	// mpsRestartBackoff is the first wait before restarting a crashed
	// daemon; it doubles to mpsMaxBackoff while the daemon keeps crashing.
	mpsRestartBackoff = 100 * time.Millisecond
	mpsMaxBackoff     = 30 * time.Second
)

// MPSFloorMiB is the default pinned limit, in MiB, of a card that serves
// no share. It is the smallest a daemon takes: a process that starts
// without CUDA_MPS_PINNED_DEVICE_MEM_LIMIT gets next to nothing rather than
// the whole card.
const MPSFloorMiB = 1

// ComputeModes sets a card's compute mode; gpu.NVML and gpu.Fake implement
// it.
type ComputeModes interface {
	SetComputeMode(uuid string, m gpu.ComputeMode) error
}

var (
	_ ComputeModes = (*gpu.NVML)(nil)
	_ ComputeModes = (*gpu.Fake)(nil)
)

// MPSConfig configures the device plugin's side of mps mode.
type MPSConfig struct {
	// Root holds each card's directory, DefaultMPSRoot when empty. It is
	// shared with the daemons' side, MPSDaemons.
	Root string
	// GPUs sets each card's compute mode to exclusive-process.
	GPUs ComputeModes
	// Now is the clock of Retain's minAge; time.Now when nil.
	Now func() time.Time
	// ReadyWait bounds Ensure's wait for the card's daemon; the daemon's
	// start and first command when zero.
	ReadyWait time.Duration
}

// MPS is the device plugin's side of mps mode. It tells the daemons' side,
// MPSDaemons, which cards need an MPS daemon and each card's default pinned
// memory limit: the limit of a client that does not set its own. It writes
// the card's desired state under Root and waits for the card's status to
// show it. A client's own limit, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, only
// lowers the server's (docs/memory-isolation.md has the real-card check).
// So the limit is the largest share the card serves, and every client's own
// limit lowers it to its share. A process that drops its own limit gets that
// largest share, no more. The shares a card serves are those Retain last
// reported held plus those Ensure added since. A card that serves none gets
// MPSFloorMiB. Before a card's first desired state, MPS sets the card to
// exclusive-process.
type MPS struct {
	cfg MPSConfig

	mu sync.Mutex
	// cards: card UUID -> what the plugin knows of its shares.
	cards map[string]*mpsCard
	// adopted is set once Retain has taken in the cards an earlier plugin
	// left a desired state for.
	adopted bool
}

// mpsCard is one card's shares.
type mpsCard struct {
	// prepared: the card is in exclusive-process mode and its directories
	// exist.
	prepared bool
	// held are the MiB of each share the card served at the last Retain.
	held []int64
	// recent are the shares Ensure added since the last Retain, and those
	// a Retain spared for being younger than its minAge.
	recent []mpsShare
	// written is the limit in the card's desired state as last written; 0
	// before this process wrote one.
	written int64
}

// mpsShare is one share Ensure added to a card.
type mpsShare struct {
	mib int64
	at  time.Time
}

// want returns the default pinned limit the card should have: the
// largest share it serves, or MPSFloorMiB when it serves none. Shares of
// 4096 and 2048 MiB give 4096.
func (c *mpsCard) want() int64 {
	w := int64(MPSFloorMiB)
	for _, mib := range c.held {
		w = max(w, mib)
	}
	for _, sh := range c.recent {
		w = max(w, sh.mib)
	}
	return w
}

// NewMPS returns the plugin's side of mps mode.
func NewMPS(cfg MPSConfig) *MPS {
	if cfg.Root == "" {
		cfg.Root = DefaultMPSRoot
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReadyWait <= 0 {
		cfg.ReadyWait = mpsReadyWait + mpsCommandTimeout
	}
	return &MPS{cfg: cfg, cards: map[string]*mpsCard{}}
}

// Dirs returns the host pipe and log directories of the card's daemon.
func (m *MPS) Dirs(uuid string) (pipe, log string) {
	base := filepath.Join(m.cfg.Root, uuid)
	return filepath.Join(base, "pipe"), filepath.Join(base, "log")
}

// ShmDir returns the host directory every daemon and client shares as
// /dev/shm (CheckMPSShm).
func (m *MPS) ShmDir() string { return filepath.Join(m.cfg.Root, MPSShmDir) }

// Ensure adds a share of limitMiB to those card uuid serves. If it is the
// largest, it raises the card's default pinned limit to it, asking for the
// card's daemon if it has none yet. It returns once the card's daemon runs
// with a default limit of at least limitMiB, which the client's own limit
// lowers to its share.
func (m *MPS) Ensure(ctx context.Context, uuid string, limitMiB int64) error {
	m.mu.Lock()
	c := m.card(uuid)
	c.recent = append(c.recent, mpsShare{mib: limitMiB, at: m.cfg.Now()})
	err := m.write(uuid, c)
	m.mu.Unlock()
	if err != nil {
		return err
	}
	status := filepath.Join(m.cfg.Root, uuid, mpsStatusFile)
	deadline := time.Now().Add(m.cfg.ReadyWait)
	for {
		got, ok, err := readMPSLimit(status, mpsStatusFresh)
		switch {
		case err != nil:
			return err
		case ok && got >= limitMiB:
			return nil
		case time.Now().After(deadline):
			_, log := m.Dirs(uuid)
			return fmt.Errorf("waiting for the MPS daemon of GPU %s to serve with a default limit of at least %d MiB: no answer within %s "+
				"(is gpushare's mps-daemons container running on this node? see its log and %s)", uuid, limitMiB, m.cfg.ReadyWait, log)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the MPS daemon of GPU %s: %w", uuid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Retain sets the shares each card serves to held: card UUID -> MiB of
// each single-card mps container that holds a share of it. It spares the
// shares Ensure added within minAge, since an Allocate may be adding one
// that held does not show yet. It moves each card's default pinned limit to
// its largest share, down or up. A card with shares held whose grants
// survived a plugin restart has no desired state from this process yet. It
// gets one, so that its daemon comes back if it is gone. The first Retain
// also takes in every card with a desired state on the host: one an earlier
// plugin left goes to MPSFloorMiB when no share is held on it.
func (m *MPS) Retain(_ context.Context, held map[string][]int64, minAge time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	cutoff := m.cfg.Now().Add(-minAge)
	if !m.adopted {
		// Cards an earlier plugin asked a daemon for: their limit follows
		// the shares held now, the floor when none is, not what it was.
		uuids, err := desiredCards(m.cfg.Root)
		if err != nil {
			return err
		}
		for _, uuid := range uuids {
			m.card(uuid)
		}
		m.adopted = true
	}
	for uuid := range held {
		m.card(uuid)
	}
	var errs []error
	for uuid, c := range m.cards {
		c.held = slices.Clone(held[uuid])
		c.recent = slices.DeleteFunc(c.recent, func(sh mpsShare) bool { return !sh.at.After(cutoff) })
		if err := m.write(uuid, c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// card returns uuid's entry, adding it. The caller holds m.mu.
func (m *MPS) card(uuid string) *mpsCard {
	c := m.cards[uuid]
	if c == nil {
		c = &mpsCard{}
		m.cards[uuid] = c
	}
	return c
}

// write writes c's desired state when its limit changed, preparing the
// card first. The caller holds m.mu.
func (m *MPS) write(uuid string, c *mpsCard) error {
	want := c.want()
	if want == c.written {
		return nil
	}
	if !c.prepared {
		pipe, log := m.Dirs(uuid)
		for _, dir := range []string{pipe, log, m.ShmDir()} {
			if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // clients in containers read them
				return fmt.Errorf("creating the MPS directory %s: %w", dir, err)
			}
		}
		if err := m.cfg.GPUs.SetComputeMode(uuid, gpu.ComputeExclusiveProcess); err != nil {
			return fmt.Errorf("preparing GPU %s for MPS: %w", uuid, err)
		}
		c.prepared = true
	}
	if err := writeMPSLimit(filepath.Join(m.cfg.Root, uuid, mpsDesiredFile), want); err != nil {
		return err
	}
	c.written = want
	return nil
}

// desiredCards returns the UUIDs of the cards with a desired state under
// root.
func desiredCards(root string) ([]string, error) {
	entries, err := os.ReadDir(root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the MPS root %s: %w", root, err)
	}
	var uuids []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != MPSShmDir {
			if _, err := os.Stat(filepath.Join(root, e.Name(), mpsDesiredFile)); err == nil {
				uuids = append(uuids, e.Name())
			}
		}
	}
	return uuids, nil
}

// mpsLimitFile is the form of a card's desired state and status.
type mpsLimitFile struct {
	// DefaultLimitMiB is the card's default pinned limit in MiB.
	DefaultLimitMiB int64 `json:"defaultLimitMiB"`
}

// readMPSLimit reads the limit in the desired state or status at path. ok
// is false when there is none. With fresh > 0, ok is also false when it was
// written longer than fresh ago: a status the daemons' side stopped
// refreshing is as good as none, since that side may be gone.
func readMPSLimit(path string, fresh time.Duration) (mib int64, ok bool, err error) {
	b, err := os.ReadFile(path) //nolint:gosec // a file under the MPS root
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("reading %s: %w", path, err)
	}
	if fresh > 0 {
		fi, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			return 0, false, nil
		}
		if err != nil {
			return 0, false, fmt.Errorf("reading %s: %w", path, err)
		}
		if time.Since(fi.ModTime()) > fresh {
			return 0, false, nil
		}
	}
	var f mpsLimitFile
	if err := json.Unmarshal(b, &f); err != nil {
		return 0, false, fmt.Errorf("reading %s: %w", path, err)
	}
	if f.DefaultLimitMiB < MPSFloorMiB {
		return 0, false, fmt.Errorf("reading %s: defaultLimitMiB %d is below %d", path, f.DefaultLimitMiB, MPSFloorMiB)
	}
	return f.DefaultLimitMiB, true, nil
}

// writeMPSLimit writes mib to path atomically, through a temporary file
// renamed over it, so the other side never reads half a file.
func writeMPSLimit(path string, mib int64) error {
	b, err := json.Marshal(mpsLimitFile{DefaultLimitMiB: mib})
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil { //nolint:gosec // read by the other side's container
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
