package prepare

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/dra/pkg/checkpoint"
	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/isolation"
)

// Enforcer gives a claim's containers the edits of its cards' isolation.
// It drops driver mode's limit devices no claim holds and moves mps mode's
// default limits to the shares claims hold. isolation.Enforcer implements it.
type Enforcer interface {
	Edits(ctx context.Context, shares []isolation.Share) (*isolation.Edits, error)
	PruneCDI(held [][]isolation.Limit, minAge time.Duration) (int, error)
	RetainMPS(ctx context.Context, held [][]isolation.Share, minAge time.Duration) error
}

var _ Enforcer = (*isolation.Enforcer)(nil)

// cdiPruneMinAge spares driver mode's limit devices younger than this from
// pruning by isolation.CDISpec.Retain: a Prepare may be adding one.
const cdiPruneMinAge = time.Minute

// Held reads what pods outside DRA hold on the node's cards: the device
// plugin's pods still running there. nodepods.Watcher implements it.
type Held interface {
	// Held returns card UUID -> MiB held; cards nothing holds are absent.
	Held() map[string]int64
}

// Config configures a State.
type Config struct {
	// Pool is the driver's pool: the node's name.
	Pool string
	// Unit is the node's unit, gpushare.UnitGiB or gpushare.UnitMiB.
	Unit string
	// Cards are the node's cards.
	Cards []devices.Card
	// CheckpointDir holds the checkpoint file.
	CheckpointDir string
	// Specs writes the claims' CDI specs.
	Specs *ClaimSpecs
	// Enforcer gives containers their isolation; nil gives none, the
	// environment only.
	Enforcer Enforcer
	// Held is what the device plugin's pods hold on the cards, counted
	// beside the prepared claims; nil: nothing.
	Held Held
}

// State is the driver's record of prepared claims: the checkpoint, the
// claims' CDI specs, and what each card's prepared claims hold. It is safe
// for concurrent use. A Prepare counts its claim's devices under s.mu. It
// builds the claim's isolation and CDI spec without the lock, since mps mode
// may wait seconds for a card's daemon. It records the claim under the lock
// again. Claims on other cards, and Unprepares, thus do not wait for that
// card.
type State struct {
	pool     string
	unit     string
	specs    *ClaimSpecs
	enforcer Enforcer
	held     Held
	// cards: device name (gpu-<index>) -> card.
	cards map[string]devices.Card

	mu sync.Mutex
	// checkpoint holds the prepared claims; written before Prepare and
	// Unprepare return.
	checkpoint *checkpoint.Checkpoint
	// preparing: claim UID -> a Prepare between counting the claim and
	// recording it. Its devices count as used; a second Prepare or an
	// Unprepare of the claim waits for it.
	preparing map[types.UID]*inFlight
}

// inFlight is a claim being prepared.
type inFlight struct {
	devices []checkpoint.Device
	// done is closed once the claim is recorded or refused.
	done chan struct{}
}

// New opens the checkpoint in cfg.CheckpointDir.
func New(cfg Config) (*State, error) {
	cp, err := checkpoint.Open(cfg.CheckpointDir)
	if err != nil {
		return nil, err
	}
	s := &State{pool: cfg.Pool, unit: cfg.Unit, specs: cfg.Specs, enforcer: cfg.Enforcer, held: cfg.Held,
		cards: map[string]devices.Card{}, checkpoint: cp, preparing: map[types.UID]*inFlight{}}
	for _, c := range cfg.Cards {
		s.cards[c.DeviceName()] = c
	}
	return s, nil
}

// Restore makes the CDI specs match the checkpoint after a start. It writes
// the spec of each prepared claim again, starting its cards' MPS daemons. It
// removes the specs of claims the checkpoint does not hold, left by a crash
// between writing a spec and the checkpoint. It builds the claims' specs at
// once, so a card whose MPS daemon does not answer delays the start by one
// wait, not one per claim. A claim whose card is gone, or whose isolation
// fails, is logged and kept: its memory stays counted until kubelet
// unprepares it. It runs before the driver serves.
func (s *State) Restore(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	claims := s.Prepared()
	uids := sortedUIDs(claims)
	errs := make([]error, len(uids))
	var wg sync.WaitGroup
	for i, uid := range uids {
		wg.Go(func() {
			pc := claims[uid]
			edits, err := s.edits(ctx, pc.Devices)
			if err != nil {
				logger.Error(err, "Restoring a prepared claim's CDI spec", "claim", klog.KRef(pc.Namespace, pc.Name), "uid", uid)
				return
			}
			errs[i] = s.specs.Write(uid, claimEdits(edits))
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	onDisk, err := s.specs.Claims()
	if err != nil {
		return err
	}
	for _, uid := range onDisk {
		if _, ok := claims[uid]; !ok {
			if err := s.specs.Remove(uid); err != nil {
				return err
			}
			logger.V(2).Info("Removed the CDI spec of a claim the checkpoint does not hold", "uid", uid)
		}
	}
	s.mu.Lock()
	s.retainLocked(ctx)
	s.mu.Unlock()
	logger.V(2).Info("Restored prepared claims", "claims", len(claims), "checkpoint", s.checkpoint.Path())
	return nil
}

// Used returns the MiB that prepared claims and claims being prepared hold
// on each card: device name -> MiB. Cards nothing holds are absent.
func (s *State) Used() map[string]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usedLocked()
}

func (s *State) usedLocked() map[string]int64 {
	used := map[string]int64{}
	for _, pc := range s.checkpoint.Claims() {
		for _, d := range pc.Devices {
			used[d.Device] += d.MiB
		}
	}
	for _, p := range s.preparing {
		for _, d := range p.devices {
			used[d.Device] += d.MiB
		}
	}
	return used
}

// Prepared returns the prepared claims: UID -> claim.
func (s *State) Prepared() map[types.UID]checkpoint.Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.checkpoint.Claims()
}

// Prepare prepares one allocated claim and returns its devices for
// kubelet: the claim's results on this driver's pool, each request's first
// result carrying the request's CDI devices. A claim prepared before gets
// its recorded answer. It refuses a result on another pool or an unknown
// device, and one that would take a card over its capacity with what
// prepared claims, claims being prepared and the device plugin's pods
// hold there.
func (s *State) Prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]checkpoint.Device, error) {
	devs, f, err := s.begin(ctx, claim)
	if err != nil || f == nil {
		return devs, err
	}
	devs, err = s.build(ctx, claim, devs)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.preparing, claim.UID)
	close(f.done)
	if err != nil {
		return nil, err
	}
	pc := checkpoint.Claim{Namespace: claim.Namespace, Name: claim.Name, Devices: devs}
	if err := s.checkpoint.Put(claim.UID, pc); err != nil {
		_ = s.specs.Remove(claim.UID)
		return nil, err
	}
	return pc.Devices, nil
}

// begin returns the recorded answer of a claim prepared before, with f nil.
// Otherwise it counts the claim's devices against the cards' capacity and
// records it as being prepared in f. It waits for another Prepare of the
// same claim to end first.
func (s *State) begin(ctx context.Context, claim *resourceapi.ResourceClaim) ([]checkpoint.Device, *inFlight, error) {
	for {
		s.mu.Lock()
		if pc, ok := s.checkpoint.Get(claim.UID); ok {
			s.mu.Unlock()
			return pc.Devices, nil, nil
		}
		other, busy := s.preparing[claim.UID]
		if !busy {
			devs, err := s.countLocked(claim)
			if err != nil {
				s.mu.Unlock()
				return nil, nil, err
			}
			f := &inFlight{devices: devs, done: make(chan struct{})}
			s.preparing[claim.UID] = f
			s.mu.Unlock()
			return devs, f, nil
		}
		s.mu.Unlock()
		select {
		case <-other.done:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("claim %s/%s: waiting for another prepare of it: %w", claim.Namespace, claim.Name, ctx.Err())
		}
	}
}

// countLocked returns the devices of claim's results on this pool, each
// request's first carrying its claim device's CDI ID, once it checked
// that they fit their cards beside what is held there. The caller holds
// s.mu.
func (s *State) countLocked(claim *resourceapi.ResourceClaim) ([]checkpoint.Device, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	var devs []checkpoint.Device
	add := map[string]int64{} // device name -> MiB this claim adds
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != devices.DriverName {
			continue
		}
		if r.Pool != s.pool {
			return nil, fmt.Errorf("claim %s/%s: result %q is device %s of pool %s, and this driver serves pool %s", claim.Namespace, claim.Name, r.Request, r.Device, r.Pool, s.pool)
		}
		c, ok := s.cards[r.Device]
		if !ok {
			return nil, fmt.Errorf("claim %s/%s: result %q is device %s, which node %s does not have (its devices: %s)", claim.Namespace, claim.Name, r.Request, r.Device, s.pool, strings.Join(slices.Sorted(maps.Keys(s.cards)), ", "))
		}
		mib := consumedMiB(r, c)
		add[r.Device] += mib
		pd := checkpoint.Device{Request: r.Request, Pool: r.Pool, Device: r.Device, UUID: c.UUID, Index: c.Index, MiB: mib}
		if r.ShareID != nil {
			pd.ShareID = string(*r.ShareID)
		}
		devs = append(devs, pd)
	}
	used := s.usedLocked()
	var held map[string]int64
	if s.held != nil {
		held = s.held.Held()
	}
	for _, dev := range slices.Sorted(maps.Keys(add)) {
		c := s.cards[dev]
		h := held[c.UUID]
		if used[dev]+h+add[dev] <= c.CapacityMiB {
			continue
		}
		plugin := ""
		if h > 0 {
			plugin = fmt.Sprintf(", and pods of the device plugin still running there %d MiB", h)
		}
		return nil, fmt.Errorf("claim %s/%s asks %d MiB of %s (GPU %d, %s) on node %s, where prepared claims already hold %d of its %d MiB%s: refusing to over-commit it; the allocation does not match what this node runs (delete the pod so that it is scheduled again)",
			claim.Namespace, claim.Name, add[dev], dev, c.Index, c.UUID, s.pool, used[dev], c.CapacityMiB, plugin)
	}
	for i := range devs {
		if i == 0 || devs[i].Request != devs[i-1].Request {
			devs[i].CDIDeviceIDs = []string{DeviceID(claim.UID, devs[i].Request)}
		}
	}
	return devs, nil
}

// build gives devs their isolation and writes the claim's CDI spec,
// without s.mu: isolation may wait for a card's MPS daemon. It returns devs
// with their limit devices.
func (s *State) build(ctx context.Context, claim *resourceapi.ResourceClaim, devs []checkpoint.Device) ([]checkpoint.Device, error) {
	devs = slices.Clone(devs)
	edits, err := s.edits(ctx, devs)
	if err != nil {
		return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
	}
	for i := range devs {
		if len(devs[i].CDIDeviceIDs) > 0 {
			devs[i].CDIDeviceIDs = append(slices.Clone(devs[i].CDIDeviceIDs), limitDevicesOf(edits, devs[i].Request)...)
		}
	}
	if len(devs) > 0 {
		if err := s.specs.Write(claim.UID, claimEdits(edits)); err != nil {
			return nil, err
		}
	}
	return devs, nil
}

// consumedMiB is the memory a result takes of card c in MiB, rounded up: its
// consumed capacity. A result without one was allocated without consumable
// capacity, which makes it exclusive: it takes the whole card.
func consumedMiB(r resourceapi.DeviceRequestAllocationResult, c devices.Card) int64 {
	q, ok := r.ConsumedCapacity[devices.CapacityMemory]
	if !ok {
		return c.CapacityMiB
	}
	return (q.Value() + 1<<20 - 1) >> 20
}

// requestEdits are the edits of one request: those of its CDI device,
// and the limit devices of driver mode's shared spec that its containers
// also get.
type requestEdits struct {
	ClaimEdits
	limitDevices []string
}

// edits builds the container edits of each request among devs, in the
// order of each request's first result: the device plugin's environment
// for the request's cards and their isolation.
func (s *State) edits(ctx context.Context, devs []checkpoint.Device) ([]requestEdits, error) {
	groups := byRequest(devs)
	out := make([]requestEdits, 0, len(groups))
	for _, g := range groups {
		e, err := s.requestEdits(ctx, g[0].Request, g)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// byRequest groups devs by request, in the order of each request's first
// result.
func byRequest(devs []checkpoint.Device) [][]checkpoint.Device {
	var out [][]checkpoint.Device
	at := map[string]int{}
	for _, d := range devs {
		i, ok := at[d.Request]
		if !ok {
			i = len(out)
			at[d.Request] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], d)
	}
	return out
}

// requestEdits builds the edits of one request whose results are devs.
//
// A request of 8 GiB on card 1, of 16 GiB in driver mode on a GiB node, gets
// NVIDIA_VISIBLE_DEVICES=<its UUID>, ALIYUN_COM_GPU_MEM_IDX=1,
// ALIYUN_COM_GPU_MEM_CONTAINER=8, ALIYUN_COM_GPU_MEM_POD=8,
// ALIYUN_COM_GPU_MEM_DEV=16, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=8G,
// GPUSHARE_ISOLATION=driver, GPUSHARE_MEMORY_LIMIT_MIB=8192,
// GPUSHARE_MEMORY_FRACTION=0.5, and the limit device
// gpushare.io/gpu-mem=1-8192.
func (s *State) requestEdits(ctx context.Context, request string, devs []checkpoint.Device) (requestEdits, error) {
	step := devices.UnitMiB(s.unit)
	envShares := make([]gpushare.EnvShare, len(devs))
	shares := make([]isolation.Share, len(devs))
	var total int64
	for i, d := range devs {
		envShares[i] = gpushare.EnvShare{UUID: d.UUID, Index: d.Index, Units: d.MiB / step}
		shares[i] = isolation.Share{UUID: d.UUID, MiB: d.MiB}
		total += d.MiB / step
	}
	env := gpushare.ContainerEnv(envShares, total, s.cards[devs[0].Device].CapacityMiB/step, s.unit)
	e := requestEdits{ClaimEdits: ClaimEdits{Request: request}}
	if s.enforcer != nil {
		ed, err := s.enforcer.Edits(ctx, shares)
		if err != nil {
			return requestEdits{}, fmt.Errorf("request %q: %w", request, err)
		}
		maps.Copy(env, ed.Env)
		e.Mounts = ed.Mounts
		e.limitDevices = ed.CDIDevices
	}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		e.Env = append(e.Env, k+"="+env[k])
	}
	return e, nil
}

// claimEdits are the CDI edits of es.
func claimEdits(es []requestEdits) []ClaimEdits {
	out := make([]ClaimEdits, len(es))
	for i, e := range es {
		out[i] = e.ClaimEdits
	}
	return out
}

// limitDevicesOf returns the limit devices of a request among es.
func limitDevicesOf(es []requestEdits, request string) []string {
	for _, e := range es {
		if e.Request == request {
			return e.limitDevices
		}
	}
	return nil
}

// Unprepare forgets a claim: it removes the claim from the checkpoint and
// its CDI spec. retainLocked then brings the isolation state in step with
// the claims left. An unknown claim is no error, as kubelet may ask twice. A
// claim being prepared is forgotten once its Prepare ends.
func (s *State) Unprepare(ctx context.Context, uid types.UID) error {
	for {
		s.mu.Lock()
		f, busy := s.preparing[uid]
		if !busy {
			err := s.unprepareLocked(ctx, uid)
			s.mu.Unlock()
			return err
		}
		s.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return fmt.Errorf("unpreparing claim %s: waiting for its prepare: %w", uid, ctx.Err())
		}
	}
}

// unprepareLocked is Unprepare once uid is not being prepared. The caller
// holds s.mu.
func (s *State) unprepareLocked(ctx context.Context, uid types.UID) error {
	if err := s.checkpoint.Delete(uid); err != nil {
		return err
	}
	if err := s.specs.Remove(uid); err != nil {
		return err
	}
	s.retainLocked(ctx)
	return nil
}

// retainLocked tells the enforcer what the prepared claims hold, each
// request's cards in order. Driver mode drops the limit devices none holds,
// sparing those younger than cdiPruneMinAge. Each mps card's default pinned
// limit moves to the largest share claims hold on it, the floor when none.
// A process that drops its own limit thus gets no more than a share still
// served. Under s.mu every share is in the checkpoint or among the claims
// being prepared, so mps spares none for its age. Errors are logged: what
// failed stays as it was. The caller holds s.mu.
func (s *State) retainLocked(ctx context.Context) {
	if s.enforcer == nil {
		return
	}
	logger := klog.FromContext(ctx)
	var limits [][]isolation.Limit
	var shares [][]isolation.Share
	var held [][]checkpoint.Device // each claim's devices: prepared, then being prepared
	claims := s.checkpoint.Claims()
	for _, uid := range sortedUIDs(claims) {
		held = append(held, claims[uid].Devices)
	}
	for _, uid := range sortedUIDs(s.preparing) {
		held = append(held, s.preparing[uid].devices)
	}
	for _, devs := range held {
		for _, g := range byRequest(devs) {
			var l []isolation.Limit
			var sh []isolation.Share
			for _, d := range g {
				l = append(l, isolation.Limit{Index: d.Index, MiB: d.MiB})
				sh = append(sh, isolation.Share{UUID: d.UUID, MiB: d.MiB})
			}
			limits, shares = append(limits, l), append(shares, sh)
		}
	}
	n, err := s.enforcer.PruneCDI(limits, cdiPruneMinAge)
	if err != nil {
		// The limit spec keeps a device too many; nothing else is wrong.
		logger.Error(err, "Pruning the CDI spec's limit devices")
	} else if n > 0 {
		logger.V(2).Info("Pruned CDI limit devices no claim holds", "removed", n)
	}
	if err := s.enforcer.RetainMPS(ctx, shares, 0); err != nil {
		logger.Error(err, "Setting the MPS default pinned limits to the largest share of each card")
	}
}

// sortedUIDs returns the keys of m sorted.
func sortedUIDs[V any](m map[types.UID]V) []types.UID {
	out := make([]types.UID, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
