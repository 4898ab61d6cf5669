package isolation

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// DefaultMPSPoll is how often the daemons' side reads each card's desired
// state.
const DefaultMPSPoll = 500 * time.Millisecond

// MPSDaemonsConfig configures the daemons' side of mps mode.
type MPSDaemonsConfig struct {
	// Control is the path of nvidia-cuda-mps-control.
	Control string
	// Root holds each card's directory, DefaultMPSRoot when empty: its
	// desired state written by the device plugin's MPS, its status written
	// here, and its daemon's pipe and log directories.
	Root string
	// Poll is how often Root is read; DefaultMPSPoll when zero.
	Poll time.Duration
	// OnRestart, when set, is called each time a crashed daemon is
	// restarted, for metrics and events.
	OnRestart func(uuid string, err error)
}

// MPSDaemons runs one MPS control daemon per card that has a desired state
// under Root. Each runs in the foreground, nvidia-cuda-mps-control -f, as
// its child, so that it notices a crash and restarts it. It runs apart from
// the device plugin, as the mps-daemons command in its own container, so a
// plugin restart leaves the daemons and their clients running. The desired
// states live on the host. When this side restarts, Reconcile, first thing
// in Run, brings back the daemon of every card that had one, before kubelet
// restarts a client container on it. Each daemon sees only its card:
// CUDA_VISIBLE_DEVICES is the card's UUID. It has its card's pipe and log
// directories and the default pinned memory limit of its desired state.
// Once it has the limit, the card's status says so, and says it again every
// Poll while the daemon runs. Stop sends each daemon "quit".
//
// The files of a card, under Root/<UUID>/:
//
//	desired.json  {"defaultLimitMiB": 2048}  written by the plugin (MPS)
//	status.json   {"defaultLimitMiB": 2048}  written here once the daemon has it,
//	                                         and every Poll; removed while it does
//	                                         not run, stale when this side is gone
//	pipe/, log/                              the daemon's, mounted into clients
type MPSDaemons struct {
	cfg MPSDaemonsConfig
	// ctx is the daemons' lifetime; Stop cancels it.
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
	dir       string
	pipe, log string
	// ready is closed once the daemon first took its limit.
	ready chan struct{}

	// send serializes the limit updates sent to the daemon, at its start
	// and from Reconcile, so that the last one sent is the one read last.
	send sync.Mutex

	mu sync.Mutex
	// wantMiB is the default pinned limit of the card's desired state.
	wantMiB int64
	// limitMiB is the default pinned limit last set on the daemon; 0
	// before the first.
	limitMiB int64
	// proc is the running daemon, nil between crash and restart.
	proc *os.Process
}

// NewMPSDaemons returns the daemons' side, whose daemons live until ctx
// ends or Stop.
func NewMPSDaemons(ctx context.Context, cfg MPSDaemonsConfig) *MPSDaemons {
	if cfg.Root == "" {
		cfg.Root = DefaultMPSRoot
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultMPSPoll
	}
	ctx, cancel := context.WithCancel(ctx)
	return &MPSDaemons{cfg: cfg, ctx: ctx, cancel: cancel, daemons: map[string]*mpsDaemon{}}
}

// Run reconciles the daemons with the desired states at once, then every
// Poll, until ctx ends; then it stops the daemons. Errors of a pass are
// logged; the next pass tries again.
func (s *MPSDaemons) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	for {
		if err := s.Reconcile(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Bringing the MPS daemons to their desired state")
		}
		select {
		case <-ctx.Done():
			return s.Stop(context.WithoutCancel(ctx))
		case <-t.C:
		}
	}
}

// Reconcile reads every card's desired state under Root once: it starts
// the daemon of a card that has none yet and sends a running daemon a
// changed limit. A card without a desired state is left alone.
func (s *MPSDaemons) Reconcile(ctx context.Context) error {
	uuids, err := desiredCards(s.cfg.Root)
	if err != nil {
		return err
	}
	var errs []error
	for _, uuid := range uuids {
		want, ok, err := readMPSLimit(filepath.Join(s.cfg.Root, uuid, mpsDesiredFile), 0)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		if err := s.serve(ctx, uuid, want); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// serve starts the daemon of card uuid with limit want, or sends a
// running one want when it changed.
func (s *MPSDaemons) serve(ctx context.Context, uuid string, want int64) error {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		return nil // no daemon starts once Stop began
	}
	if err := s.ctx.Err(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("serving the MPS daemon of GPU %s: %w", uuid, err)
	}
	d, ok := s.daemons[uuid]
	if !ok {
		dir := filepath.Join(s.cfg.Root, uuid)
		d = &mpsDaemon{uuid: uuid, dir: dir, pipe: filepath.Join(dir, "pipe"), log: filepath.Join(dir, "log"), ready: make(chan struct{}), wantMiB: want}
		for _, p := range []string{d.pipe, d.log, filepath.Join(s.cfg.Root, MPSShmDir)} {
			if err := os.MkdirAll(p, 0o755); err != nil { //nolint:gosec // clients in containers read them
				s.mu.Unlock()
				return fmt.Errorf("creating the MPS directory %s: %w", p, err)
			}
		}
		// A status left by a daemon of an earlier run is stale.
		if err := os.Remove(filepath.Join(dir, mpsStatusFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.mu.Unlock()
			return fmt.Errorf("removing the stale MPS status of GPU %s: %w", uuid, err)
		}
		s.daemons[uuid] = d
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.supervise(d)
		}()
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	d.mu.Lock()
	d.wantMiB = want
	d.mu.Unlock()
	select {
	case <-d.ready:
	default:
		return nil // the daemon's start sends the limit
	}
	if err := s.apply(ctx, d, false); err != nil {
		return err
	}
	return s.refresh(d)
}

// refresh rewrites the status of d's card while its daemon runs with its
// limit, so that the plugin sees this side is alive within mpsStatusFresh.
func (s *MPSDaemons) refresh(d *mpsDaemon) error {
	d.send.Lock()
	defer d.send.Unlock()
	d.mu.Lock()
	running, limit := d.proc != nil && d.limitMiB == d.wantMiB, d.limitMiB
	d.mu.Unlock()
	if !running {
		return nil
	}
	return writeMPSLimit(filepath.Join(d.dir, mpsStatusFile), limit)
}

// apply sets d's default pinned limit to its desired one, when it differs
// from the one set or always is true. It sets it on the control daemon, for
// servers it spawns later, and on each MPS server it runs, for their next
// clients. It then writes the card's status. The daemon sees its card as
// device 0.
func (s *MPSDaemons) apply(ctx context.Context, d *mpsDaemon, always bool) error {
	d.send.Lock()
	defer d.send.Unlock()
	d.mu.Lock()
	want, set := d.wantMiB, d.limitMiB
	d.mu.Unlock()
	if want == set && !always {
		return nil
	}
	limit := " 0 " + strconv.FormatInt(want, 10) + "M"
	if _, err := s.command(ctx, d, "set_default_device_pinned_mem_limit"+limit); err != nil {
		return err
	}
	out, err := s.command(ctx, d, "get_server_list")
	if err != nil {
		return err
	}
	for _, pid := range strings.Fields(out) {
		if _, err := strconv.Atoi(pid); err != nil {
			return fmt.Errorf("reading the MPS servers of GPU %s: %q is not a PID", d.uuid, pid)
		}
		if _, err := s.command(ctx, d, "set_device_pinned_mem_limit "+pid+limit); err != nil {
			return err
		}
	}
	d.mu.Lock()
	d.limitMiB = want
	d.mu.Unlock()
	return writeMPSLimit(filepath.Join(d.dir, mpsStatusFile), want)
}

// supervise runs d's daemon until s.ctx ends, restarting it when it exits
// on its own.
func (s *MPSDaemons) supervise(d *mpsDaemon) {
	logger := klog.FromContext(s.ctx).WithValues("uuid", d.uuid)
	backoff := mpsRestartBackoff
	for {
		started := time.Now()
		err := s.runOnce(logger, d)
		if rerr := os.Remove(filepath.Join(d.dir, mpsStatusFile)); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			logger.Error(rerr, "Removing the status of an exited MPS control daemon")
		}
		if s.done() {
			return
		}
		if time.Since(started) > mpsMaxBackoff {
			backoff = mpsRestartBackoff
		}
		logger.Error(err, "MPS control daemon exited; restarting it", "in", backoff)
		if s.cfg.OnRestart != nil {
			s.cfg.OnRestart(d.uuid, err)
		}
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, mpsMaxBackoff)
	}
}

// runOnce starts the daemon, sends it the desired limit, and waits for it
// to exit. It returns why it exited.
func (s *MPSDaemons) runOnce(logger klog.Logger, d *mpsDaemon) error {
	cmd := exec.Command(s.cfg.Control, "-f") //nolint:gosec // the operator's --mps-control
	cmd.Env = s.env(d)
	// In the foreground the daemon writes its log to its standard output,
	// not to log/control.log (docs/memory-isolation.md). The last of it
	// says why it exited.
	out := &tailBuffer{max: mpsOutputTail}
	cmd.Stdout, cmd.Stderr = out, out
	// The MPS servers it starts may inherit the output: Wait does not wait
	// for them once the daemon itself has exited.
	cmd.WaitDelay = mpsOutputWait
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s -f: %w", s.cfg.Control, err)
	}
	d.mu.Lock()
	d.proc = cmd.Process
	limit := d.wantMiB
	d.mu.Unlock()
	var exitErr error
	exited := make(chan struct{})
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	logger.Info("MPS control daemon started", "pid", cmd.Process.Pid, "pipe", d.pipe, "defaultLimitMiB", limit)
	// A daemon that exits at once is not waited for to answer.
	ctx, cancel := context.WithTimeout(s.ctx, mpsReadyWait+mpsCommandTimeout)
	go func() {
		select {
		case <-exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := s.apply(ctx, d, true)
	cancel()
	if err == nil {
		select {
		case <-d.ready:
		default:
			close(d.ready)
		}
	} else if s.ctx.Err() == nil {
		select {
		case <-exited:
		default:
			logger.Error(err, "MPS control daemon does not take its default limit")
		}
	}
	select {
	case <-exited:
		d.mu.Lock()
		d.proc = nil
		d.mu.Unlock()
		if exitErr == nil {
			return fmt.Errorf("MPS control daemon of GPU %s exited without being asked to (output: %q)", d.uuid, out.String())
		}
		return fmt.Errorf("MPS control daemon of GPU %s exited: %w (output: %q)", d.uuid, exitErr, out.String())
	case <-s.ctx.Done():
		<-exited
		return exitErr
	}
}

// mpsOutputTail is how many bytes of a daemon's output are kept to say why
// it exited.
const mpsOutputTail = 2048

// mpsOutputWait bounds how long Wait reads a daemon's output after the
// daemon exited: os/exec's WaitDelay.
const mpsOutputWait = time.Second

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// done reports whether the daemons are being stopped.
func (s *MPSDaemons) done() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping || s.ctx.Err() != nil
}

// env is the environment of the daemon and of control commands for d.
func (s *MPSDaemons) env(d *mpsDaemon) []string {
	return append(os.Environ(), envVisibleDevices+"="+d.uuid, EnvMPSPipeDir+"="+d.pipe, EnvMPSLogDir+"="+d.log)
}

// command sends one line to d's daemon through the control binary and
// returns its answer, retrying until ctx ends or mpsReadyWait passes while
// the daemon does not answer yet.
func (s *MPSDaemons) command(ctx context.Context, d *mpsDaemon, line string) (string, error) {
	deadline := time.Now().Add(mpsReadyWait)
	wait := 20 * time.Millisecond
	for {
		cctx, cancel := context.WithTimeout(ctx, mpsCommandTimeout)
		cmd := exec.CommandContext(cctx, s.cfg.Control) //nolint:gosec // the operator's --mps-control
		cmd.Env = s.env(d)
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

// Stop sends "quit" to every daemon and waits for them to exit, killing
// those that do not within mpsQuitWait. It returns the errors met. The
// cards' desired states stay: the next run brings their daemons back.
func (s *MPSDaemons) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	daemons := make([]*mpsDaemon, 0, len(s.daemons))
	for _, d := range s.daemons {
		daemons = append(daemons, d)
	}
	s.mu.Unlock()
	var errs []error
	for _, d := range daemons {
		d.mu.Lock()
		running := d.proc != nil
		d.mu.Unlock()
		if !running {
			continue
		}
		qctx, cancel := context.WithTimeout(ctx, mpsCommandTimeout)
		if _, err := s.command(qctx, d, "quit"); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	// The supervisors see the context end and do not restart the daemons
	// that quit; those that did not are killed after mpsQuitWait.
	s.cancel()
	done := make(chan struct{})
	go func() {
		s.wg.Wait()
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
