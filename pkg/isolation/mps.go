package isolation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"

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
	// finds its card's pipe and log directories (CUDA's defaults, so that a
	// client finds them even without the environment).
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

// Timing of the daemon supervision.
const (
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
// no share: the smallest a daemon takes, so that a process that starts
// without CUDA_MPS_PINNED_DEVICE_MEM_LIMIT gets next to nothing rather
// than the whole card.
const MPSFloorMiB = 1

// ComputeModes sets a card's compute mode (gpu.NVML, gpu.Fake).
type ComputeModes interface {
	SetComputeMode(uuid string, m gpu.ComputeMode) error
}

var (
	_ ComputeModes = (*gpu.NVML)(nil)
	_ ComputeModes = (*gpu.Fake)(nil)
)

// MPSConfig configures an MPS manager.
type MPSConfig struct {
	// Control is the path of nvidia-cuda-mps-control.
	Control string
	// Root holds each card's pipe and log directories (DefaultMPSRoot).
	Root string
	// GPUs sets each card's compute mode to exclusive-process.
	GPUs ComputeModes
	// OnRestart, when set, is called each time a crashed daemon is
	// restarted (metrics, events).
	OnRestart func(uuid string, err error)
	// Now is the clock of Retain's minAge; time.Now when nil.
	Now func() time.Time
}

// MPS runs one MPS control daemon per card in use, in the foreground
// (nvidia-cuda-mps-control -f) as its child so that it notices a crash
// and restarts it. Each daemon sees only its card (CUDA_VISIBLE_DEVICES
// is the card's UUID), has its own pipe and log directories under Root,
// and a default pinned memory limit (the limit of a client that does not
// set its own) equal to the smallest share its card serves, so that no
// process gets more than any share by dropping its own limit. The shares a
// card serves are those Retain last reported held plus those Ensure added
// since; a card that serves none gets MPSFloorMiB. Stop sends each daemon
// "quit".
type MPS struct {
	cfg MPSConfig
	// ctx is the daemons' lifetime (Stop cancels it).
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// daemons: card UUID -> its daemon.
	daemons map[string]*mpsDaemon
	// stopping is set by Stop: no daemon starts or restarts after it.
	stopping bool
}

// mpsDaemon is one card's daemon.
type mpsDaemon struct {
	uuid      string
	pipe, log string
	// ready is closed once the daemon first answered a command.
	ready chan struct{}

	// send serializes the limit updates sent to the daemon (at its start,
	// from Ensure and from Retain), so that the last one sent is the one
	// computed last.
	send sync.Mutex

	mu sync.Mutex
	// held are the MiB of each share the card served at the last Retain.
	held []int64
	// recent are the shares Ensure added since the last Retain, and those
	// a Retain spared for being younger than its minAge.
	recent []mpsShare
	// limitMiB is the default pinned limit last set on the daemon; 0
	// before the first.
	limitMiB int64
	// proc is the running daemon, nil between crash and restart.
	proc *os.Process
}

// mpsShare is one share Ensure added to a card.
type mpsShare struct {
	mib int64
	at  time.Time
}

// wantLocked returns the default pinned limit d's card should have: the
// smallest share it serves, or MPSFloorMiB when it serves none. Shares of
// 4096 and 2048 MiB give 2048. The caller holds d.mu.
func (d *mpsDaemon) wantLocked() int64 {
	var w int64
	for _, mib := range d.held {
		if w == 0 || mib < w {
			w = mib
		}
	}
	for _, sh := range d.recent {
		if w == 0 || sh.mib < w {
			w = sh.mib
		}
	}
	return max(w, MPSFloorMiB)
}

// NewMPS returns a manager whose daemons live until ctx ends or Stop.
func NewMPS(ctx context.Context, cfg MPSConfig) *MPS {
	if cfg.Root == "" {
		cfg.Root = DefaultMPSRoot
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(ctx)
	return &MPS{cfg: cfg, ctx: ctx, cancel: cancel, daemons: map[string]*mpsDaemon{}}
}

// Dirs returns the host pipe and log directories of the card's daemon.
func (m *MPS) Dirs(uuid string) (pipe, log string) {
	base := filepath.Join(m.cfg.Root, uuid)
	return filepath.Join(base, "pipe"), filepath.Join(base, "log")
}

// ShmDir returns the host directory every daemon and client shares as
// /dev/shm (CheckMPSShm).
func (m *MPS) ShmDir() string { return filepath.Join(m.cfg.Root, MPSShmDir) }

// Ensure starts the card's daemon if it does not run yet (after setting
// the card to exclusive-process), adds a share of limitMiB to those the
// card serves, and lowers the card's default pinned limit to it if it is
// the smallest. It returns once the daemon answers and has the limit.
func (m *MPS) Ensure(ctx context.Context, uuid string, limitMiB int64) error {
	m.mu.Lock()
	if m.stopping || m.ctx.Err() != nil {
		m.mu.Unlock()
		return fmt.Errorf("using the MPS daemon of GPU %s: the plugin is stopping", uuid)
	}
	d, ok := m.daemons[uuid]
	if !ok {
		pipe, log := m.Dirs(uuid)
		for _, dir := range []string{pipe, log, m.ShmDir()} {
			if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // clients in containers read them
				m.mu.Unlock()
				return fmt.Errorf("creating the MPS directory %s: %w", dir, err)
			}
		}
		if err := m.cfg.GPUs.SetComputeMode(uuid, gpu.ComputeExclusiveProcess); err != nil {
			m.mu.Unlock()
			return fmt.Errorf("preparing GPU %s for MPS: %w", uuid, err)
		}
		d = &mpsDaemon{uuid: uuid, pipe: pipe, log: log, ready: make(chan struct{})}
		m.daemons[uuid] = d
	}
	// The share counts before a new daemon starts, which then sends it.
	d.mu.Lock()
	d.recent = append(d.recent, mpsShare{mib: limitMiB, at: m.cfg.Now()})
	d.mu.Unlock()
	if !ok {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			m.supervise(d)
		}()
	}
	m.mu.Unlock()
	select {
	case <-d.ready:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the MPS daemon of GPU %s: %w", uuid, ctx.Err())
	case <-time.After(mpsReadyWait + mpsCommandTimeout):
		return fmt.Errorf("waiting for the MPS daemon of GPU %s: it does not answer (see %s)", uuid, d.log)
	}
	return m.apply(ctx, d, false)
}

// Retain sets the shares each card serves to held (card UUID -> MiB of
// each single-card mps container that holds a share of it), sparing the
// shares Ensure added within minAge (an Allocate may be adding one that
// held does not show yet), and moves each card's default pinned limit to
// its smallest share, down or up. Cards without a daemon are left alone.
func (m *MPS) Retain(ctx context.Context, held map[string][]int64, minAge time.Duration) error {
	m.mu.Lock()
	daemons := make([]*mpsDaemon, 0, len(m.daemons))
	for _, d := range m.daemons {
		daemons = append(daemons, d)
	}
	m.mu.Unlock()
	cutoff := m.cfg.Now().Add(-minAge)
	var errs []error
	for _, d := range daemons {
		d.mu.Lock()
		d.held = slices.Clone(held[d.uuid])
		d.recent = slices.DeleteFunc(d.recent, func(sh mpsShare) bool { return !sh.at.After(cutoff) })
		d.mu.Unlock()
		select {
		case <-d.ready:
		default:
			continue // the daemon's start sends the limit
		}
		if err := m.apply(ctx, d, false); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// apply sets d's default pinned limit to the one its shares call for, when
// it differs from the one set or always is true, on the control daemon
// (for servers it spawns later) and on each MPS server it runs (for their
// next clients). The daemon sees its card as device 0.
func (m *MPS) apply(ctx context.Context, d *mpsDaemon, always bool) error {
	d.send.Lock()
	defer d.send.Unlock()
	d.mu.Lock()
	want, set := d.wantLocked(), d.limitMiB
	d.mu.Unlock()
	if want == set && !always {
		return nil
	}
	limit := " 0 " + strconv.FormatInt(want, 10) + "M"
	if _, err := m.command(ctx, d, "set_default_device_pinned_mem_limit"+limit); err != nil {
		return err
	}
	out, err := m.command(ctx, d, "get_server_list")
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(out) {
		if _, err := strconv.Atoi(pid); err != nil {
			return fmt.Errorf("reading the MPS servers of GPU %s: %q is not a PID", d.uuid, pid)
		}
		if _, err := m.command(ctx, d, "set_device_pinned_mem_limit "+pid+limit); err != nil {
			return err
		}
	}
	d.mu.Lock()
	d.limitMiB = want
	d.mu.Unlock()
	return nil
}

// supervise runs d's daemon until m.ctx ends, restarting it when it exits
// on its own.
func (m *MPS) supervise(d *mpsDaemon) {
	logger := klog.FromContext(m.ctx).WithValues("uuid", d.uuid)
	backoff := mpsRestartBackoff
	for {
		started := time.Now()
		err := m.runOnce(logger, d)
		if m.done() {
			return
		}
		if time.Since(started) > mpsMaxBackoff {
			backoff = mpsRestartBackoff
		}
		logger.Error(err, "MPS control daemon exited; restarting it", "in", backoff)
		if m.cfg.OnRestart != nil {
			m.cfg.OnRestart(d.uuid, err)
		}
		select {
		case <-m.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, mpsMaxBackoff)
	}
}

// runOnce starts the daemon, sends it the default limit, and waits for it
// to exit. It returns why it exited.
func (m *MPS) runOnce(logger klog.Logger, d *mpsDaemon) error {
	cmd := exec.Command(m.cfg.Control, "-f") //nolint:gosec // the operator's --mps-control
	cmd.Env = m.env(d)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s -f: %w", m.cfg.Control, err)
	}
	d.mu.Lock()
	d.proc = cmd.Process
	limit := d.wantLocked()
	d.mu.Unlock()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	logger.Info("MPS control daemon started", "pid", cmd.Process.Pid, "pipe", d.pipe, "defaultLimitMiB", limit)
	ctx, cancel := context.WithTimeout(m.ctx, mpsReadyWait+mpsCommandTimeout)
	err := m.apply(ctx, d, true)
	cancel()
	if err == nil {
		select {
		case <-d.ready:
		default:
			close(d.ready)
		}
	} else if m.ctx.Err() == nil {
		logger.Error(err, "MPS control daemon does not take its default limit")
	}
	select {
	case err := <-exited:
		d.mu.Lock()
		d.proc = nil
		d.mu.Unlock()
		if err == nil {
			return fmt.Errorf("MPS control daemon of GPU %s exited without being asked to (stderr: %q)", d.uuid, stderr.String())
		}
		return fmt.Errorf("MPS control daemon of GPU %s exited: %w (stderr: %q)", d.uuid, err, stderr.String())
	case <-m.ctx.Done():
		return <-exited
	}
}

// done reports whether the daemons are being stopped.
func (m *MPS) done() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopping || m.ctx.Err() != nil
}

// env is the environment of the daemon and of control commands for d.
func (m *MPS) env(d *mpsDaemon) []string {
	return append(os.Environ(), envVisibleDevices+"="+d.uuid, EnvMPSPipeDir+"="+d.pipe, EnvMPSLogDir+"="+d.log)
}

// command sends one line to d's daemon through the control binary and
// returns its answer, retrying until ctx ends or mpsReadyWait passes while
// the daemon does not answer yet.
func (m *MPS) command(ctx context.Context, d *mpsDaemon, line string) (string, error) {
	deadline := time.Now().Add(mpsReadyWait)
	wait := 20 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, mpsCommandTimeout)
		cmd := exec.CommandContext(cctx, m.cfg.Control) //nolint:gosec // the operator's --mps-control
		cmd.Env = m.env(d)
		cmd.Stdin = bytes.NewBufferString(line + "\n")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err == nil {
			return string(out), nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return "", fmt.Errorf("sending %q to the MPS daemon of GPU %s: %w (output: %q)", line, d.uuid, err, string(out)+stderr.String())
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// Stop sends "quit" to every daemon, waits for them to exit (killing those
// that do not within mpsQuitWait), and returns the errors met.
func (m *MPS) Stop(ctx context.Context) error {
	m.mu.Lock()
	m.stopping = true
	daemons := make([]*mpsDaemon, 0, len(m.daemons))
	for _, d := range m.daemons {
		daemons = append(daemons, d)
	}
	m.mu.Unlock()
	var errs []error
	for _, d := range daemons {
		d.mu.Lock()
		running := d.proc != nil
		d.mu.Unlock()
		if !running {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, mpsCommandTimeout)
		if _, err := m.command(qctx, d, "quit"); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	// The supervisors see the context end and do not restart the daemons
	// that quit; those that did not are killed after mpsQuitWait.
	m.cancel()
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(mpsQuitWait):
		for _, d := range daemons {
			d.mu.Lock()
			if d.proc != nil {
				_ = d.proc.Kill()
			}
			d.mu.Unlock()
		}
		<-done
	}
	return errors.Join(errs...)
}
