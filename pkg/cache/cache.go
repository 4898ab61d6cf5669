package cache

import (
	"errors"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache/internal/view"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/pkg/workload"
)

// State is where a pod's allocation is in its life (see the package doc).
type State string

const (
	// StateAssumed: bind chose the cards and the pod is not bound yet. The
	// allocation expires at its deadline unless bound.
	StateAssumed State = "assumed"
	// StateBound: the pod is bound to the node, or its Binding was made.
	StateBound State = "bound"
)

// Errors callers check with errors.Is.
var (
	ErrUnknownNode    = errors.New("node unknown to the extender")
	ErrBoundElsewhere = errors.New("pod already bound to another node")
	ErrBindInFlight   = errors.New("an earlier bind of the pod has not ended")
	ErrPodGone        = errors.New("pod deleted")
)

// DefaultAssumeTTL is how long an assumed allocation survives without its
// Binding. It is longer than a bind's API round trips, and short enough
// that memory held for a crashed bind comes back quickly.
const DefaultAssumeTTL = 2 * time.Minute

// Config builds a Cache.
type Config struct {
	// Policy is the default scoring policy name (allocator.PolicyNames).
	Policy string
	// AssumeTTL, default DefaultAssumeTTL.
	AssumeTTL time.Duration
	// Clock, default the real clock.
	Clock clock.PassiveClock
	// OnIgnored, when set, is called each time a pod's allocation annotation
	// starts being ignored, or is ignored for another reason. It runs without
	// the cache's lock; the extender logs it.
	OnIgnored func(inspectapi.Ignored)
}

// Cache is the extender's allocation state. All methods are safe for
// concurrent use; none makes API calls or blocks on I/O.
type Cache struct {
	mu sync.Mutex
	// nodes: node name -> its cards and the pods on them.
	nodes map[string]*nodeState
	// draNodes: node name -> the cards the gpushare DRA driver publishes for
	// it (SetDRANode). The node takes them unless the device plugin serves it.
	draNodes map[string]*draNode
	// pods: pod UID -> what it holds. A pod may name a node not (yet) in nodes.
	pods map[types.UID]*podState
	// workload learns typical requests from every gpu-mem pod placed, once
	// each: assumed by our bind or seen bound. Pending pods teach it nothing.
	workload *workload.Workload
	// observed: the pods already fed to workload, by observedKey; entries
	// leave on delete. The key is a 64-bit hash of the UID, 8 bytes a pod
	// rather than a 16-byte string header; the set is never listed. Two pods
	// share a key with odds of about pods²/2⁶⁵ (4·10⁻¹⁰ at 120,000 pods). That
	// would only leave one pod out of the workload's statistics.
	observed map[uint64]struct{}
	// observedSeed seeds observedKey; immutable.
	observedSeed maphash.Seed
	// gone: observedKey(pod UID) -> when the informer delivered the pod's
	// delete, kept for assumeTTL (Expire prunes). A bind that read the pod just
	// before the delete must not hold cards for it after: no later event would
	// release them (ErrPodGone).
	gone map[uint64]time.Time
	// hosts: pod UID -> the node whose CPU and memory the pod holds. Entries
	// are every bound, unfinished pod, GPU or not, and every assumed
	// allocation. Each node's reqMilliCPU and reqMemMiB sum its entries.
	hosts map[types.UID]hostUse
	// holes summarises every node's cards for fragaware's waste model. Each
	// change of a node's cards takes the node out and puts it back
	// (allocator.Holes.AddNode).
	holes *allocator.Holes
	// maxMilliCPU and maxUnits: the largest allocatable CPU and healthy GPU
	// capacity among the nodes, by which the bestfit and fgd host scores scale.
	maxMilliCPU, maxUnits int64
	// pendingIgnored: pod UID -> a pending pod carrying an allocation
	// annotation, kept to show in Inspect. It holds nothing: only our own
	// Assume holds cards for a pending pod. An entry leaves when the pod is
	// bound, loses the annotation, or is deleted.
	pendingIgnored map[types.UID]ignoredPod
	// floor: pod UID -> the resourceVersion a catch-up applied (ApplyQuorum).
	// Informer events of the pod older than it are ignored. An entry leaves
	// when the informer delivers that version or a newer one, or the delete.
	floor map[types.UID]uint64
	// catchUp is the current catch-up, nil when none runs (BeginCatchUp).
	catchUp *CatchUp
	// generation counts the publishes that changed something (a node, or
	// the policy's inputs), read without the lock (Generation).
	generation atomic.Uint64
	// reservations counts the StateReserved entries, read without the lock.
	// While it is 0, no pod's fit needs its credit.
	reservations atomic.Int64
	// priorities: pod priority -> how many entries of that priority hold memory
	// on cards (all but reservations). A pod can preempt only when a lower
	// priority exists (LowestPriority).
	priorities map[int32]int
	// view is what the readers see without the lock: the published copy of
	// every node seen (not placeholders), the policy's inputs, and our
	// assumptions' nodes (view.View.Pin). publish, hold and remove write it
	// under mu (see view.Snap).
	view *view.View
	// dirty: the nodes changed since the last publish (touch);
	// inputsDirty: holes, maxima or hosts changed; workloadDirty: the
	// workload model learned a pod.
	dirty                      []*nodeState
	inputsDirty, workloadDirty bool

	policy    string        // default policy name; immutable
	assumeTTL time.Duration // immutable
	clock     clock.PassiveClock
	onIgnored func(inspectapi.Ignored) // immutable; called without c.mu
}

type nodeState struct {
	// seen: SetNode has this node. It is false for a placeholder: pods named
	// the node before its own event came, or it was deleted under them.
	seen bool
	// node holds the cards; each card's Used is the sum over pods of
	// podState.perCard for its index.
	node   allocator.Node
	source string // SourceInventory, SourceCapacity, SourceDRA or SourceNone
	// info is what the node informer last gave SetNodeInfo, nil for a
	// placeholder. SetDRANode applies the node again with it.
	info *kubeinfo.NodeInfo
	// invErr explains an ignored inventory annotation; empty when fine.
	invErr string
	// cordonErr explains an invalid gpushare.io/cordoned-gpus annotation, which
	// cordons every card. cordonMissing lists the UUIDs a valid one names that
	// no card has.
	cordonErr     string
	cordonMissing []string
	// pods: UIDs of the pods charged to this node.
	pods map[types.UID]struct{}
	// dirty: changed since the last publish (listed in Cache.dirty). gen
	// counts the publishes of this node (view.Snap.Gen). slot is where they
	// go, nil while readers know no copy of the node.
	dirty bool
	gen   uint64
	slot  *view.Slot
	// missing: units pods hold on card indexes the node no longer has.
	missing int64
	// unattributed: units of gpu-mem pods on this node whose cards are unknown.
	unattributed int64

	// hostKnown: the node reports its CPU; then allocMilliCPU and
	// allocMemMiB are its allocatable CPU (millicores) and memory (MiB).
	hostKnown                  bool
	allocMilliCPU, allocMemMiB int64
	// reqMilliCPU and reqMemMiB: what the Cache.hosts entries on this node
	// request; hostPods: their number.
	reqMilliCPU, reqMemMiB int64
	hostPods               int
}

// hostUse is the CPU (millicores) and memory (MiB) a pod holds on a node,
// one per bound pod. It names the node by its state, 8 bytes rather than a
// 16-byte name. DeleteNode keeps a node with hostPods as a placeholder, so
// the pointer never goes stale.
type hostUse struct {
	ns               *nodeState
	milliCPU, memMiB int64
	// assumed: held for an assumed allocation (the pod is not bound yet), and
	// released with it.
	assumed bool
}

// podState is what one pod holds, one entry per pod: what few entries need
// goes in rare.
type podState struct {
	namespace, name string
	node            string
	state           State
	// ours: this extender chose alloc (Assume). Otherwise the entry is the
	// informer's view of a bound pod. resolve then decides what it is charged
	// from claim, demand and legacyIndex, again whenever its node's cards
	// change.
	ours bool
	// terminating: the pod has a deletionTimestamp; a preemption counts its
	// memory as free.
	terminating bool
	// confirmed: the informer showed the pod bound to node. Our Binding may be
	// made for a pod the informer never delivers: created, bound through the
	// API fallback and deleted within one watch gap. Such an entry keeps its
	// deadline until confirmed, so it cannot be charged forever.
	confirmed bool
	// dra: the entry is a claim of the gpushare DRA driver (UpsertClaim). On a
	// DRA node only those are charged: the driver's slice already leaves out
	// what device-plugin pods still hold there.
	dra bool
	// legacyIndex: see claim.
	legacyIndex int32
	// priority is the pod's spec.priority (0 when unset).
	priority int32
	// mpsUser is who the pod's MPS clients run as (PodInfo.MPSUser).
	mpsUser gpushare.MPSUser
	// alloc is the allocation charged, in the node's unit: ours, or the pod's
	// annotation once resolve accepted it. It is nil for a pod charged by its
	// Aliyun index or unattributed.
	alloc *gpushare.Allocation
	// claim is a bound pod's allocation annotation as parsed; nil when absent
	// or unparsable (claimErr then says why). demand is the pod's request.
	// legacyIndex is its ALIYUN_COM_GPU_MEM_IDX, -1 when absent. All three are
	// unset for our own entries.
	claim  *gpushare.Allocation
	demand gpushare.Demand
	// perCard: card index -> units held.
	perCard allocator.CardUnits
	// unattributed: units held on the node on unknown cards.
	unattributed int64
	// deadline: an assumed allocation is released when it passes. So is a
	// bound one the informer never confirmed (see confirmed).
	deadline time.Time
	// rare holds what few entries have; nil when none of it is set.
	rare *podRare
}

// podRare is the part of a podState that few pods have. It costs a pod 8
// bytes (podState.rare) rather than 56.
type podRare struct {
	// claimErr says why the pod's allocation annotation did not parse.
	claimErr string
	// ignored says why claim is not charged; "" when it is, or there is none.
	// The pod is then charged by its request, as if unannotated.
	ignored string
	// victims: for a StateReserved entry (preempt.go), the UIDs of the pods
	// evicted for it, which later preemptions count as gone. limit: the room
	// waits for them no later than this.
	victims []types.UID
	limit   time.Time
}

// newPodRare returns a podRare holding claimErr and victims, nil when both
// are empty.
func newPodRare(claimErr string, victims []types.UID) *podRare {
	if claimErr == "" && len(victims) == 0 {
		return nil
	}
	return &podRare{claimErr: claimErr, victims: victims}
}

func (ps *podState) claimErr() string {
	if ps.rare == nil {
		return ""
	}
	return ps.rare.claimErr
}

func (ps *podState) ignored() string {
	if ps.rare == nil {
		return ""
	}
	return ps.rare.ignored
}

func (ps *podState) victims() []types.UID {
	if ps.rare == nil {
		return nil
	}
	return ps.rare.victims
}

// setIgnored records why ps's claim is not charged ("": it is), keeping
// rare nil when it then holds nothing.
func (ps *podState) setIgnored(reason string) {
	switch {
	case ps.rare != nil:
		ps.rare.ignored = reason
		if ps.rare.claimErr == "" && ps.rare.ignored == "" && len(ps.rare.victims) == 0 {
			ps.rare = nil
		}
	case reason != "":
		ps.rare = &podRare{ignored: reason}
	}
}

// ignoredPod is a pending pod whose allocation annotation is ignored.
type ignoredPod struct {
	namespace, name string
	// node the annotation names.
	node   string
	reason string
}

// New returns an empty cache.
func New(cfg Config) (*Cache, error) {
	if cfg.Policy == "" {
		cfg.Policy = allocator.DefaultPolicy
	}
	if _, err := allocator.New(cfg.Policy, nil, nil); err != nil {
		return nil, err
	}
	if cfg.AssumeTTL <= 0 {
		cfg.AssumeTTL = DefaultAssumeTTL
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	c := &Cache{
		nodes:          map[string]*nodeState{},
		draNodes:       map[string]*draNode{},
		pods:           map[types.UID]*podState{},
		workload:       workload.New(),
		observed:       map[uint64]struct{}{},
		gone:           map[uint64]time.Time{},
		observedSeed:   maphash.MakeSeed(),
		hosts:          map[types.UID]hostUse{},
		holes:          allocator.NewHoles(),
		pendingIgnored: map[types.UID]ignoredPod{},
		floor:          map[types.UID]uint64{},
		priorities:     map[int32]int{},
		policy:         cfg.Policy,
		assumeTTL:      cfg.AssumeTTL,
		clock:          cfg.Clock,
		onIgnored:      cfg.OnIgnored,
	}
	c.view = view.New(&view.Inputs{DefaultPolicy: c.policy, Holes: c.holes.Clone()}, c.creditFor)
	return c, nil
}

// DefaultPolicy returns the configured default policy name.
func (c *Cache) DefaultPolicy() string { return c.policy }

// Counts returns the numbers of known nodes and of pods holding memory.
func (c *Cache) Counts() (nodes, pods int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.nodes), len(c.pods)
}

// CardTotal returns the total units of card index idx on node.
func (c *Cache) CardTotal(node string, idx int) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ns, ok := c.nodes[node]
	if !ok {
		return 0, false
	}
	pos := ns.position(idx)
	if pos < 0 {
		return 0, false
	}
	return ns.node.Cards[pos].Total, true
}
