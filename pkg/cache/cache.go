package cache

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// State is where a pod's allocation is in its life (see the package doc).
type State string

const (
	// StateAssumed: cards chosen by bind (or found in an annotation of a
	// pod not yet bound); expires at its deadline unless bound.
	StateAssumed State = "assumed"
	// StateBound: the pod is bound to the node (or its Binding was made).
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
// Binding: longer than a bind's API round trips, short enough that memory
// held for a crashed bind comes back quickly.
const DefaultAssumeTTL = 2 * time.Minute

// Config builds a Cache.
type Config struct {
	// Policy is the default scoring policy name (allocator.PolicyNames).
	Policy string
	// AssumeTTL, default DefaultAssumeTTL.
	AssumeTTL time.Duration
	// Clock, default the real clock.
	Clock clock.PassiveClock
	// OnIgnored, when set, is called (without the cache's lock) each time a
	// pod's allocation annotation starts being ignored or is ignored for
	// another reason: the extender logs it.
	OnIgnored func(IgnoredView)
}

// Cache is the extender's allocation state. All methods are safe for
// concurrent use; none makes API calls or blocks on I/O.
type Cache struct {
	mu sync.Mutex
	// nodes: node name -> its cards and the pods on them.
	nodes map[string]*nodeState
	// draNodes: node name -> the cards the gpushare DRA driver publishes
	// for it (SetDRANode), which the node takes unless the device plugin
	// serves it.
	draNodes map[string]*draNode
	// pods: pod UID -> what it holds. A pod may name a node not (yet) in nodes.
	pods map[types.UID]*podState
	// workload learns typical requests from every gpu-mem pod placed
	// (assumed by our bind or seen bound), once each; pending pods teach
	// it nothing.
	workload *allocator.Workload
	// observed: the pods already fed to workload, by observedKey; entries
	// leave on delete. A 64-bit hash of the UID rather than the UID: 8
	// bytes a pod, not a 16-byte string header, and the set is never
	// listed. Two pods of a cluster share a key with odds of about
	// pods²/2⁶⁵ (4·10⁻¹⁰ at 120,000 pods), which would leave one pod out
	// of the workload's statistics, nothing more.
	observed map[uint64]struct{}
	// observedSeed seeds observedKey; immutable.
	observedSeed maphash.Seed
	// gone: observedKey(pod UID) -> when the informer delivered the pod's
	// delete, kept assumeTTL (Expire prunes): a bind that read the pod
	// just before the delete must not hold cards for it after, which no
	// later event would release (assumable refuses it, ErrPodGone).
	gone map[uint64]time.Time
	// hosts: pod UID -> the node whose CPU and memory the pod holds: every
	// pod bound to a node and not finished, GPU or not, and every assumed
	// allocation. Each node's reqMilliCPU and reqMemMiB sum its entries.
	hosts map[types.UID]hostUse
	// holes summarises every node's cards for fragaware's waste model;
	// each change of a node's cards takes the node out of it and puts it
	// back (allocator.Holes.AddNode).
	holes *allocator.Holes
	// maxMilliCPU and maxUnits: the largest allocatable CPU and healthy GPU
	// capacity among the nodes (the bestfit and fgd host scores scale by
	// them).
	maxMilliCPU, maxUnits int64
	// pendingIgnored: pod UID -> a pending pod carrying an allocation
	// annotation, which holds nothing (only our own Assume holds cards for
	// a pending pod); kept to show in Inspect. Entries leave when the pod
	// is bound, loses the annotation, or is deleted.
	pendingIgnored map[types.UID]ignoredPod
	// floor: pod UID -> the resourceVersion a catch-up applied
	// (ApplyQuorum); informer events of the pod older than it are ignored.
	// An entry leaves when the informer delivers that version or a newer
	// one, or the pod's delete.
	floor map[types.UID]uint64
	// catchUp is the current catch-up, nil when none runs (BeginCatchUp).
	catchUp *CatchUp
	// generation counts the publishes that changed something (a node, or
	// the policy's inputs), read without the lock (Generation).
	generation atomic.Uint64
	// reservations counts the entries of pods in StateReserved (Reserve),
	// read without the lock: while it is 0 no pod's fit needs its credit.
	reservations atomic.Int64
	// priorities: pod priority -> how many entries of that priority hold
	// memory on cards (every entry but reservations). A pod can only
	// preempt when one of a lower priority exists (LowestPriority).
	priorities map[int32]int
	// binding: pod UID (types.UID) -> node name (string), for each of our
	// assumptions (StateAssumed): a bind that has not ended, or ended with
	// an unknown outcome. Written under mu beside pods; read without it by
	// the verbs, which send the pod's next try to that node (pinnedNode).
	binding sync.Map

	// index finds the slot holding the last published copy of every node
	// seen (not placeholders), by name; inputs:
	// the policy's inputs as last published. Both are written under mu
	// by publish and read without it (see nodeSnap).
	index  atomic.Pointer[nodeIndex]
	inputs atomic.Pointer[policyInputs]
	// dirty: the nodes changed since the last publish (touch);
	// inputsDirty: holes, maxima or hosts changed; workloadDirty: the
	// workload model learned a pod.
	dirty                      []*nodeState
	inputsDirty, workloadDirty bool

	policy    string        // default policy name; immutable
	assumeTTL time.Duration // immutable
	clock     clock.PassiveClock
	onIgnored func(IgnoredView) // immutable; called without c.mu
}

type nodeState struct {
	// seen: SetNode has this node. False for a placeholder: pods named the
	// node before its own event came, or the node was deleted under them.
	seen bool
	// node holds the cards; each card's Used is the sum over pods of
	// podState.perCard for its index.
	node   allocator.Node
	source string // SourceInventory, SourceCapacity, SourceDRA or SourceNone
	// info is what the node informer last gave SetNodeInfo (nil for a
	// placeholder): SetDRANode applies the node again with it.
	info *NodeInfo
	// invErr explains an ignored inventory annotation; empty when fine.
	invErr string
	// cordonErr explains an invalid gpushare.io/cordoned-gpus annotation
	// (every card is then cordoned); cordonMissing lists the UUIDs a valid
	// one names that no card has.
	cordonErr     string
	cordonMissing []string
	// pods: UIDs of the pods charged to this node.
	pods map[types.UID]struct{}
	// dirty: changed since the last publish (in Cache.dirty); gen counts
	// the publishes of this node (nodeSnap.gen); slot is where they go,
	// nil while readers know no copy of the node.
	dirty bool
	gen   uint64
	slot  *nodeSlot
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
// one per bound pod: 32 bytes, the node by its state rather than its name
// (16). The state stays in Cache.nodes while a hostUse names it (DeleteNode
// keeps a node with hostPods as a placeholder), so the pointer never goes
// stale.
type hostUse struct {
	ns               *nodeState
	milliCPU, memMiB int64
	// assumed: held for an assumed allocation (the pod is not bound yet);
	// released with it.
	assumed bool
}

type podState struct {
	namespace, name string
	node            string
	state           State
	// ours: this extender chose alloc (Assume). Otherwise the entry is
	// the informer's view of a bound pod, and resolve decides from claim,
	// demand and legacyIndex what it is charged, again whenever its node's
	// cards change.
	ours bool
	// terminating: the pod has a deletionTimestamp (a preemption counts
	// its memory as free).
	terminating bool
	// confirmed: the informer showed the pod bound to node. Our Binding may
	// be made for a pod the informer never delivers (created, bound through
	// the API fallback and deleted within one watch gap): such an entry
	// keeps its deadline until confirmed, so it cannot be charged forever.
	// (Beside ours, terminating, dra and legacyIndex: the five take 8
	// bytes. The entry is 192 bytes, one per pod: keep what few entries
	// need in rare.)
	confirmed bool
	// dra: the entry is a claim of the gpushare DRA driver (UpsertClaim).
	// On a DRA node only those are charged: the driver's slice already
	// leaves out what pods of the device plugin still hold there.
	dra bool
	// legacyIndex: see claim.
	legacyIndex int32
	// priority is the pod's spec.priority (0 when unset).
	priority int32
	// mpsUser is who the pod's MPS clients run as (PodInfo.MPSUser).
	mpsUser gpushare.MPSUser
	// alloc is the allocation charged: ours, or the pod's annotation once
	// resolve accepted it (in the node's unit); nil for a pod charged by
	// its Aliyun index or unattributed.
	alloc *gpushare.Allocation
	// claim is a bound pod's allocation annotation as parsed (nil when
	// absent or unparsable, claimErr then says why it did not parse),
	// demand its request, legacyIndex its ALIYUN_COM_GPU_MEM_IDX (-1 when
	// absent). Unset for our own entries.
	claim  *gpushare.Allocation
	demand gpushare.Demand
	// perCard: card index -> units held.
	perCard cardUnits
	// unattributed: units held on the node on unknown cards.
	unattributed int64
	// deadline: an assumed allocation is released when it passes, and so
	// is a bound one the informer never confirmed (see confirmed).
	deadline time.Time
	// rare holds what few entries have; nil when none of it is set.
	rare *podRare
}

// podRare is the part of a podState that few pods have: 8 bytes a pod
// (podState.rare) rather than 56.
type podRare struct {
	// claimErr says why the pod's allocation annotation did not parse.
	claimErr string
	// ignored says why claim is not charged ("" when it is, or there is
	// none); the pod is then charged by its request, as if unannotated.
	ignored string
	// victims: for a StateReserved entry (preempt.go), the UIDs of the
	// pods evicted for it, which later preemptions count as gone; limit:
	// the room waits for them no later than this.
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
		workload:       allocator.NewWorkload(),
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
	c.inputs.Store(&policyInputs{defaultPolicy: c.policy, holes: c.holes.Clone()})
	c.index.Store(&nodeIndex{})
	return c, nil
}

// SetNode adds or updates a node. An error reports an inventory annotation
// that was ignored (the node is still updated from its capacity) or an
// invalid gpushare.io/cordoned-gpus annotation (every card is then
// cordoned), or both.
func (c *Cache) SetNode(node *corev1.Node) error { return c.SetNodeInfo(NewNodeInfo(node)) }

// SetNodeInfo is SetNode for what the node informer keeps of a node.
func (c *Cache) SetNodeInfo(node *NodeInfo) error {
	in := nodeInput{name: node.Name}
	in.unit, in.cards, in.source, in.invErr = nodeCards(node)
	in.cpu, in.mem, in.hostKnown = node.milliCPU, node.memMiB, node.hostKnown
	c.mu.Lock()
	if d := c.draNodes[node.Name]; d != nil && (in.source == SourceNone || node.gpuMem <= 0) {
		// The driver's slice wins over the device plugin's inventory and
		// capacity unless the plugin serves the node: a node that moved to
		// DRA keeps them (nothing removes them), but kubelet reports no
		// allocatable aliyun.com/gpu-mem once the plugin is gone; one that
		// moved back keeps the driver's slice for 30 s.
		in.unit, in.cards, in.source, in.invErr = d.unit, slices.Clone(d.cards), SourceDRA, nil
	}
	in.cordonMissing, in.cordonErr = cordonCards(node, in.cards)
	c.nodeState(node.Name).info = node
	newly := c.setNode(&in)
	c.publish()
	c.mu.Unlock()
	c.report(newly)
	return errors.Join(in.invErr, in.cordonErr)
}

// draNode is what the gpushare DRA driver publishes for a node.
type draNode struct {
	// unit of the cards' Total (the node's request step).
	unit string
	// cards, ordered by Index, their Rank their place in the slice.
	cards []allocator.Card
}

// SetDRANode records the cards the gpushare DRA driver publishes for node
// (its ResourceSlice; unit is the node's, each card's Rank its place in
// the slice), or forgets them when cards is empty. The node takes them,
// with source SourceDRA, once the node informer has shown the node, in
// place of any cards of the device plugin (gpushare.io/devices: a node
// that moved to DRA keeps it) unless the plugin serves the node (its
// allocatable aliyun.com/gpu-mem is not 0); its cordon annotation
// applies to them. Pods whose claims hold memory there are
// charged by UpsertClaim; pods of the device plugin still running there
// are not, as the slice already leaves out what they hold.
func (c *Cache) SetDRANode(node, unit string, cards []allocator.Card) error {
	cards = slices.Clone(cards)
	slices.SortFunc(cards, func(a, b allocator.Card) int { return cmp.Compare(a.Index, b.Index) })
	c.mu.Lock()
	if len(cards) == 0 {
		delete(c.draNodes, node)
	} else {
		c.draNodes[node] = &draNode{unit: unit, cards: cards}
	}
	ns, ok := c.nodes[node]
	var info *NodeInfo
	if ok {
		info = ns.info
	}
	c.mu.Unlock()
	if info == nil {
		return nil // SetNodeInfo takes them when the node comes
	}
	return c.SetNodeInfo(info)
}

// nodeInput is what SetNode reads of a node.
type nodeInput struct {
	name, unit, source string
	cards              []allocator.Card
	// invErr: an ignored inventory annotation; cordonErr: an invalid
	// cordon annotation; cordonMissing: UUIDs it names that no card has.
	invErr, cordonErr error
	cordonMissing     []string
	// cpu (millicores) and mem (MiB) allocatable; hostKnown: the node
	// reports its CPU.
	cpu, mem  int64
	hostKnown bool
}

// setNode applies SetNode under c.mu and returns the pods whose allocation
// annotation the node's new cards make it ignore.
func (c *Cache) setNode(in *nodeInput) []IgnoredView {
	ns := c.nodeState(in.name)
	ns.seen = true
	c.touch(ns)
	oldCPU, oldUnits := ns.allocMilliCPU, ns.node.Capacity()
	c.holes.AddNode(&ns.node, -1)
	c.addHost(ns, -1)
	ns.node = allocator.Node{Name: in.name, Unit: in.unit, Cards: in.cards}
	ns.source = in.source
	ns.hostKnown, ns.allocMilliCPU, ns.allocMemMiB = in.hostKnown, in.cpu, in.mem
	c.updateMax(oldCPU, oldUnits, in.cpu, ns.node.Capacity())
	ns.invErr, ns.cordonErr = "", ""
	if in.invErr != nil {
		ns.invErr = in.invErr.Error()
	}
	if in.cordonErr != nil {
		ns.cordonErr = in.cordonErr.Error()
	}
	ns.cordonMissing = in.cordonMissing
	ns.missing, ns.unattributed = 0, 0
	var newly []IgnoredView
	for uid := range ns.pods {
		ps := c.pods[uid]
		if !ps.ours {
			was := ps.ignored()
			ns.resolve(ps)
			if now := ps.ignored(); now != "" && now != was {
				newly = append(newly, IgnoredView{Namespace: ps.namespace, Name: ps.name, Reason: now})
			}
		}
		ns.charge(ps, 1)
	}
	c.holes.AddNode(&ns.node, 1)
	c.addHost(ns, 1)
	return newly
}

// report passes newly ignored annotations to Config.OnIgnored. The caller
// does not hold c.mu.
func (c *Cache) report(newly []IgnoredView) {
	if c.onIgnored == nil {
		return
	}
	for _, v := range newly {
		c.onIgnored(v)
	}
}

// DeleteNode forgets a node's cards and CPU. Pods still on it stay known
// (the node is kept as a placeholder without cards), so they are charged
// again if the node comes back.
func (c *Cache) DeleteNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	ns, ok := c.nodes[name]
	if !ok {
		return
	}
	c.touch(ns)
	c.holes.AddNode(&ns.node, -1) // a node without cards adds nothing back
	c.addHost(ns, -1)
	oldCPU, oldUnits := ns.allocMilliCPU, ns.node.Capacity()
	if len(ns.pods) == 0 && ns.hostPods == 0 {
		delete(c.nodes, name)
	} else {
		ns.seen, ns.node.Cards, ns.source, ns.invErr, ns.info = false, nil, SourceNone, "", nil
		ns.cordonErr, ns.cordonMissing = "", nil
		ns.hostKnown, ns.allocMilliCPU, ns.allocMemMiB = false, 0, 0
		ns.missing, ns.unattributed = 0, 0
		for uid := range ns.pods {
			ns.charge(c.pods[uid], 1) // all of it lands in missing
		}
	}
	c.updateMax(oldCPU, oldUnits, 0, 0)
}

// nodeState returns name's state, adding an empty placeholder (no cards,
// source none) for a node not seen yet: pod events may come before the
// node's, and SetNode charges the pods already recorded. The caller holds c.mu.
func (c *Cache) nodeState(name string) *nodeState {
	ns, ok := c.nodes[name]
	if !ok {
		ns = &nodeState{pods: map[types.UID]struct{}{}, source: SourceNone, node: allocator.Node{Name: name, Unit: gpushare.DefaultUnit}}
		c.nodes[name] = ns
	}
	return ns
}

// updateMax keeps maxMilliCPU and maxUnits in step after one node's
// allocatable CPU and GPU capacity went from oldCPU and oldUnits to cpu and
// units: it scans every node only when the node held a maximum and shrank.
// The caller holds c.mu.
func (c *Cache) updateMax(oldCPU, oldUnits, cpu, units int64) {
	if cpu < oldCPU && oldCPU == c.maxMilliCPU || units < oldUnits && oldUnits == c.maxUnits {
		c.rescanMax()
		return
	}
	c.maxMilliCPU, c.maxUnits = max(c.maxMilliCPU, cpu), max(c.maxUnits, units)
}

// rescanMax recomputes maxMilliCPU and maxUnits. The caller holds c.mu.
func (c *Cache) rescanMax() {
	c.maxMilliCPU, c.maxUnits = 0, 0
	for _, ns := range c.nodes {
		c.maxMilliCPU = max(c.maxMilliCPU, ns.allocMilliCPU)
		c.maxUnits = max(c.maxUnits, ns.node.Capacity())
	}
}

// setHost records that uid holds milliCPU and memMiB on node (assumed:
// for an assumed allocation), replacing what it held. The caller holds
// c.mu.
func (c *Cache) setHost(uid types.UID, node string, milliCPU, memMiB int64, assumed bool) {
	ns := c.nodeState(node)
	h := hostUse{ns: ns, milliCPU: milliCPU, memMiB: memMiB, assumed: assumed}
	if old, ok := c.hosts[uid]; ok {
		if old == h {
			return
		}
		c.dropHost(uid)
	}
	c.hosts[uid] = h
	c.touch(ns)
	c.addHost(ns, -1)
	ns.reqMilliCPU += h.milliCPU
	ns.reqMemMiB += h.memMiB
	ns.hostPods++
	c.addHost(ns, 1)
}

// addHost adds (sign 1) or takes away (sign −1) ns's free CPU in the
// holes' FreeMilliCPU, if ns has cards and reports its CPU: call it with −1
// before changing its cards, CPU or requests and with 1 after. The caller
// holds c.mu.
func (c *Cache) addHost(ns *nodeState, sign int) {
	if ns.hostKnown && len(ns.node.Cards) > 0 {
		c.holes.AddHost(ns.allocMilliCPU-ns.reqMilliCPU, sign)
	}
}

// observeCPUOnly feeds the workload model, once per pod, the CPU of a pod
// that asks no GPU memory and is bound to a node with cards: it shares
// that node's CPU with GPU pods (allocator.Workload.CPUPerUnit). The
// caller holds c.mu.
func (c *Cache) observeCPUOnly(pod *PodInfo) {
	if pod.Demand != nil || pod.ClaimPod || pod.NodeName == "" || pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed {
		return
	}
	key := c.observedKey(pod.UID)
	if _, seen := c.observed[key]; seen {
		return
	}
	if ns, ok := c.nodes[pod.NodeName]; !ok || len(ns.node.Cards) == 0 {
		return
	}
	c.observed[key] = struct{}{}
	c.workload.ObserveCPUOnly(pod.MilliCPU)
	c.workloadDirty = true
}

// observedKey is uid's key in c.observed.
func (c *Cache) observedKey(uid types.UID) uint64 { return maphash.String(c.observedSeed, string(uid)) }

// dropHost forgets what uid holds on its node, if anything. The caller holds c.mu.
func (c *Cache) dropHost(uid types.UID) {
	h, ok := c.hosts[uid]
	if !ok {
		return
	}
	delete(c.hosts, uid)
	ns := h.ns
	c.touch(ns)
	c.addHost(ns, -1)
	ns.reqMilliCPU -= h.milliCPU
	ns.reqMemMiB -= h.memMiB
	ns.hostPods--
	c.addHost(ns, 1)
}

// syncHost brings uid's hosts entry in line with pod and with its
// allocation (c.pods). The caller holds c.mu.
func (c *Cache) syncHost(pod *PodInfo) {
	switch {
	case pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed:
		c.dropHost(pod.UID)
	case pod.NodeName != "":
		c.setHost(pod.UID, pod.NodeName, pod.MilliCPU, pod.MemoryMiB, false)
	default:
		if ps, ok := c.pods[pod.UID]; ok && (ps.state == StateAssumed || ps.state == StateReserved) {
			c.setHost(pod.UID, ps.node, pod.MilliCPU, pod.MemoryMiB, true)
			return
		}
		c.dropHost(pod.UID)
	}
}

// charge adds (sign 1) or removes (sign -1) what ps holds to the cards.
func (ns *nodeState) charge(ps *podState, sign int64) {
	for _, cu := range ps.perCard {
		pos := ns.position(cu.idx)
		if pos < 0 {
			ns.missing += sign * cu.units
			continue
		}
		ns.node.Cards[pos].Used += sign * cu.units
	}
	ns.unattributed += sign * ps.unattributed
}

// position returns the position of card index idx in ns.node.Cards, or -1.
func (ns *nodeState) position(idx int) int {
	cards := ns.node.Cards
	if idx >= 0 && idx < len(cards) && cards[idx].Index == idx {
		return idx
	}
	for i := range cards {
		if cards[i].Index == idx {
			return i
		}
	}
	return -1
}

// add records ps under uid and charges its node, resolving first what an
// entry that is not ours is charged. The caller holds c.mu and has removed
// any previous entry for uid.
func (c *Cache) add(uid types.UID, ps *podState) {
	c.pods[uid] = ps
	if ps.state != StateReserved {
		c.priorities[ps.priority]++
	}
	ns := c.nodeState(ps.node)
	if !ps.ours {
		ns.resolve(ps)
	}
	ns.pods[uid] = struct{}{}
	c.touch(ns)
	c.holes.AddNode(&ns.node, -1)
	ns.charge(ps, 1)
	c.holes.AddNode(&ns.node, 1)
}

// remove drops uid's entry, if any, and uncharges its node, with the CPU
// and memory held for it if it was only assumed. The caller holds c.mu.
func (c *Cache) remove(uid types.UID) {
	ps, ok := c.pods[uid]
	if !ok {
		return
	}
	delete(c.pods, uid)
	switch ps.state {
	case StateReserved:
		c.reservations.Add(-1)
	case StateAssumed:
		c.binding.Delete(uid)
	}
	if ps.state != StateReserved {
		if c.priorities[ps.priority]--; c.priorities[ps.priority] <= 0 {
			delete(c.priorities, ps.priority)
		}
	}
	if h, ok := c.hosts[uid]; ok && h.assumed {
		c.dropHost(uid)
	}
	if ns, ok := c.nodes[ps.node]; ok {
		delete(ns.pods, uid)
		c.touch(ns)
		c.holes.AddNode(&ns.node, -1)
		ns.charge(ps, -1)
		c.holes.AddNode(&ns.node, 1)
	}
}

// UpsertPod applies a pod add or update.
func (c *Cache) UpsertPod(pod *corev1.Pod) { c.UpsertPodInfo(NewPodInfo(pod)) }

// UpsertPodInfo applies a pod add or update from the informer.
func (c *Cache) UpsertPodInfo(pod *PodInfo) {
	c.mu.Lock()
	if c.stale(pod) {
		c.mu.Unlock()
		return
	}
	c.upsertAndUnlock(pod, true)
}

// upsertAndUnlock applies pod's GPU memory and (with host: a pod, not a
// claim) its host requests, releases c.mu (which the caller holds) and
// reports the pod's allocation annotation once it newly becomes ignored.
func (c *Cache) upsertAndUnlock(pod *PodInfo, host bool) {
	was := c.ignoredReason(pod.UID)
	c.upsertGPU(pod)
	if host {
		c.syncHost(pod)
		c.observeCPUOnly(pod)
	}
	now := c.ignoredReason(pod.UID)
	c.publish()
	c.mu.Unlock()
	if now != "" && now != was {
		c.report([]IgnoredView{{Namespace: pod.Namespace, Name: pod.Name, Reason: now}})
	}
}

// ignoredReason says why uid's allocation annotation is ignored, "" if it
// is not. The caller holds c.mu.
func (c *Cache) ignoredReason(uid types.UID) string {
	if ps, ok := c.pods[uid]; ok {
		return ps.ignored()
	}
	return c.pendingIgnored[uid].reason
}

// upsertGPU applies a pod event to the pod's allocation. The caller holds
// c.mu.
//
// Only two kinds of allocation are charged: those this extender chose
// (Assume), and those a bound pod's annotation carries that resolve finds
// to fit the pod's request and the node's cards. Anyone who can create a
// pod can write the annotation; our Binding writes it together with the
// node, so a pending pod's annotation is never ours and holds nothing.
func (c *Cache) upsertGPU(pod *PodInfo) {
	if pod.Demand == nil {
		// No gpu-mem (or an invalid request, which no node admits).
		c.forgetPod(pod.UID)
		return
	}
	if pod.NodeName != "" {
		c.observePlaced(pod)
	}
	if pod.Phase == corev1.PodSucceeded || pod.Phase == corev1.PodFailed {
		c.forgetPod(pod.UID)
		return
	}
	old := c.pods[pod.UID]
	if pod.NodeName == "" {
		// Pending: only our own Assume holds cards for it (a pending event
		// without annotation predates its Binding; a failed Binding is
		// released by Forget). An annotation here is someone else's.
		if pod.Allocation != nil || pod.AllocationErr != "" {
			node := ""
			if pod.Allocation != nil {
				node = pod.Allocation.Node
			}
			c.pendingIgnored[pod.UID] = ignoredPod{namespace: pod.Namespace, name: pod.Name, node: node,
				reason: fmt.Sprintf("pod is not bound yet but carries %s, which only the extender's bind writes (together with the node); it holds nothing", gpushare.AnnotationAllocation)}
		} else {
			delete(c.pendingIgnored, pod.UID)
		}
		if old != nil && !old.ours {
			c.remove(pod.UID) // cannot happen: pods are not unbound
		}
		return
	}
	delete(c.pendingIgnored, pod.UID)
	if old != nil && old.ours && old.node == pod.NodeName && pod.Allocation != nil && reflect.DeepEqual(old.alloc, pod.Allocation) {
		// Our bind's annotation coming back: confirmed.
		old.state, old.confirmed, old.deadline = StateBound, true, time.Time{}
		c.setTerminating(old, pod.Terminating)
		c.binding.Delete(pod.UID)
		return
	}
	ps := &podState{namespace: pod.Namespace, name: pod.Name, node: pod.NodeName, state: StateBound, confirmed: true, terminating: pod.Terminating, dra: pod.DRA,
		priority: pod.Priority, mpsUser: pod.MPSUser, claim: pod.Allocation, rare: newPodRare(pod.AllocationErr, nil), demand: pod.Demand, legacyIndex: int32(pod.LegacyIndex)} //nolint:gosec // G115: NewPodInfo keeps LegacyIndex within 32 bits
	if old != nil && !old.ours && old.sameInputs(ps) {
		// A status update: nothing the charge depends on changed.
		c.setTerminating(old, pod.Terminating)
		return
	}
	// Placed by us and changed since (the device plugin repaired it to the
	// cards kubelet gave), or placed by someone else: re-charged as resolve
	// says.
	c.remove(pod.UID)
	c.add(pod.UID, ps)
}

// setTerminating records whether ps's pod terminates; a change touches its
// node, so that a preemption sees it (Generation moves on). The caller
// holds c.mu.
func (c *Cache) setTerminating(ps *podState, terminating bool) {
	if ps.terminating == terminating {
		return
	}
	ps.terminating = terminating
	if ns, ok := c.nodes[ps.node]; ok {
		c.touch(ns)
	}
}

// sameInputs reports whether ps and o, two entries of one bound pod, would
// resolve alike.
func (ps *podState) sameInputs(o *podState) bool {
	return ps.node == o.node && ps.claimErr() == o.claimErr() && ps.legacyIndex == o.legacyIndex &&
		ps.demand.Total() == o.demand.Total() && reflect.DeepEqual(ps.claim, o.claim)
}

// resolve decides what ps, the informer's view of a bound pod on ns, is
// charged: its allocation annotation when accept takes it, else its request
// on the card its Aliyun index names, else its request unattributed. The
// caller holds the cache's lock.
func (ns *nodeState) resolve(ps *podState) {
	ps.alloc, ps.perCard, ps.unattributed = nil, nil, 0
	ps.setIgnored("")
	if ns.source == SourceDRA && !ps.dra {
		return // the driver's slice leaves out what the pod holds
	}
	if ps.claim != nil || ps.claimErr() != "" {
		a, reason := ns.accept(ps)
		if reason == "" {
			ps.alloc, ps.perCard = a, cardUnitsOf(a.PerCard())
			return
		}
		ps.setIgnored(reason)
	}
	if ps.legacyIndex >= 0 {
		ps.perCard = cardUnits{{idx: int(ps.legacyIndex), units: ps.demand.Total()}}
	} else {
		ps.unattributed = ps.demand.Total()
	}
}

// accept returns ps's allocation annotation in the node's unit if it fits
// the pod's request and the node's cards, else why not. Until the node's
// own event arrives, its cards and unit are unknown and only the request is
// checked; SetNode resolves again.
func (ns *nodeState) accept(ps *podState) (*gpushare.Allocation, string) {
	if err := ps.claimErr(); err != "" {
		return nil, err
	}
	a := ps.claim
	if a.Node != ps.node {
		return nil, fmt.Sprintf("allocation names node %s; the pod runs on %s", a.Node, ps.node)
	}
	if ns.seen && a.Unit != ns.node.Unit {
		conv, err := a.InUnit(ns.node.Unit)
		if err != nil {
			return nil, err.Error()
		}
		if err := conv.CheckDemand(ps.demand); err != nil {
			return nil, fmt.Sprintf("allocation in %s does not fit the pod's request once converted to node %s's %s: %v", a.Unit, ns.node.Name, ns.node.Unit, err)
		}
		a = conv
	} else if err := a.CheckDemand(ps.demand); err != nil {
		return nil, err.Error()
	}
	if !ns.seen {
		return a, ""
	}
	// A card index the node does not report is charged to its missing
	// units, as for a node that lost a card under running pods: not to a
	// card either way.
	for _, c := range a.Containers {
		for _, d := range c.Devices {
			pos := ns.position(d.Index)
			if pos < 0 {
				continue
			}
			if uuid := ns.node.Cards[pos].UUID(); d.UUID != "" && uuid != "" && d.UUID != uuid {
				return nil, fmt.Sprintf("allocation names card %d as %s; node %s's card %d is %s", d.Index, d.UUID, ns.node.Name, d.Index, uuid)
			}
		}
	}
	for idx, u := range a.PerCard() {
		if pos := ns.position(idx); pos >= 0 && u > ns.node.Cards[pos].Total {
			return nil, fmt.Sprintf("allocation holds %d %s on card %d, which has %d %s", u, a.Unit, idx, ns.node.Cards[pos].Total, a.Unit)
		}
	}
	return a, ""
}

// observePlaced feeds the workload model, once per pod, a pod that asks
// GPU memory and was placed: bound to a node (the informer's view), or
// assumed by our bind. Pending pods teach it nothing: anyone may create
// pods that never schedule, and they must not steer the policy. The caller
// holds c.mu.
func (c *Cache) observePlaced(pod *PodInfo) {
	key := c.observedKey(pod.UID)
	if _, seen := c.observed[key]; seen {
		return
	}
	c.observed[key] = struct{}{}
	c.workload.ObservePod(pod.Demand, pod.MilliCPU, pod.MemoryMiB)
	c.workloadDirty = true
}

// forgetPod drops everything uid holds on cards and what is known of its
// annotation. The caller holds c.mu.
func (c *Cache) forgetPod(uid types.UID) {
	c.remove(uid)
	delete(c.pendingIgnored, uid)
}

// UpsertClaim charges what a ResourceClaim of the gpushare DRA driver
// holds, as a bound pod keyed by the claim's UID: claim.NodeName is the
// node of its allocation, Demand one container of the memory asked on one
// card, Allocation the card and memory of the allocation (in any unit; it
// is converted to the node's, and must fit its cards as any allocation
// annotation must), MilliCPU and MemoryMiB its pod's requests (the workload
// model learns the claim as a GPU pod; its pod, PodInfo.ClaimPod, asks no
// gpu-mem and is charged only its CPU and memory). A claim whose allocation is gone (deallocated) is
// forgotten with DeleteClaim. Claims are never preemption victims: the
// extender evicts pods for GPU memory only on the device plugin's nodes.
func (c *Cache) UpsertClaim(claim *PodInfo) {
	claim.Priority, claim.PreemptNever, claim.DRA = math.MaxInt32, true, true
	c.mu.Lock()
	c.upsertAndUnlock(claim, false)
}

// DeleteClaim forgets what the claim of UID uid held (UpsertClaim).
func (c *Cache) DeleteClaim(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	c.forgetPod(uid)
	delete(c.observed, c.observedKey(uid))
}

// DeletePod applies a pod delete from the informer.
func (c *Cache) DeletePod(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	c.forgetPod(uid)
	c.dropHost(uid)
	key := c.observedKey(uid)
	delete(c.observed, key)
	c.gone[key] = c.clock.Now()
	c.deleted(uid)
}

// Assume chooses cards for pod's Demand on node with the pod's policy (the
// default when it names none) and holds them, and the pod's CPU and memory,
// as assumed until FinishBinding, Forget or the deadline. It is idempotent:
// for a pod that already holds an allocation on node it returns that
// allocation and holds nothing more. It returns ErrBoundElsewhere for a pod
// bound to another node, ErrBindInFlight for a pod whose bind to another
// node has not ended (or ended with an unknown outcome), ErrPodGone for a
// pod whose delete the informer has delivered, ErrUnknownNode for a node
// the extender has not seen, or an *allocator.FitError (one with filter's
// reason for a node without GPUs).
//
// The search runs on the node's published copy without the lock, spending
// a request budget that ends with ctx; the choice is then held only if the
// node has not changed meanwhile (else it is made again, at most
// optimisticTries times, then under the lock, still within the budget).
// So a bind's search never holds the lock that informer events and other
// binds take.
func (c *Cache) Assume(ctx context.Context, pod *PodInfo, node string) (*gpushare.Allocation, error) {
	if err := pod.placeable(); err != nil {
		return nil, err
	}
	b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
	pl := &allocator.Placement{}
	for try := 0; ; try++ {
		c.mu.Lock()
		ns, done, err := c.assumable(pod, node)
		if done != nil || err != nil {
			c.mu.Unlock()
			return done, err
		}
		p, err := c.inputs.Load().policy(pod.Policy)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		cr := c.creditLocked(pod.GetUID()) // room reserved for the pod (preempt.go) is free to it
		if try >= optimisticTries {
			reason := fitReason(withForeignMPS(cr.onNode(&ns.node), ns.mpsUsers(c.pods), pod.MPSUser), ns.source, ns.invErr, pod, p, pl, b)
			alloc, err := c.hold(pod, ns, pl, reason)
			c.mu.Unlock()
			return alloc, err
		}
		gen, snap := ns.gen, cr.on(c.snapOf(node)).forMPS(pod.MPSUser) // published before the lock was released: snap.gen == gen
		c.mu.Unlock()

		reason := fitReason(&snap.node, snap.source, snap.invErr, pod, p, pl, b)

		c.mu.Lock()
		ns, done, err = c.assumable(pod, node)
		switch {
		case done != nil || err != nil:
			c.mu.Unlock()
			return done, err
		case ns.gen != gen:
			// The node changed under the search (so did the pod's room
			// reserved there, if any: Reserve and its release touch it).
			c.mu.Unlock()
			continue // choose again
		}
		alloc, err := c.hold(pod, ns, pl, reason)
		c.mu.Unlock()
		return alloc, err
	}
}

// optimisticTries is how many times Assume searches a node's published
// copy before it searches under the lock: a node changes between two of
// its tries only when an informer event or another bind hits that very
// node in the meantime.
const optimisticTries = 3

// assumable returns node's state if pod may be placed there now; done is
// the allocation the pod already holds there (Assume is idempotent), err
// why it may not. The caller holds c.mu.
func (c *Cache) assumable(pod *PodInfo, node string) (ns *nodeState, done *gpushare.Allocation, err error) {
	if _, ok := c.gone[c.observedKey(pod.GetUID())]; ok {
		return nil, nil, fmt.Errorf("pod %s/%s (UID %s): %w", pod.GetNamespace(), pod.GetName(), pod.GetUID(), ErrPodGone)
	}
	if ps, ok := c.pods[pod.GetUID()]; ok && ps.state != StateReserved {
		switch {
		case ps.node == node && ps.alloc != nil:
			return nil, ps.alloc, nil
		case ps.state == StateBound:
			return nil, nil, fmt.Errorf("pod %s/%s is on node %s, not %s: %w", pod.GetNamespace(), pod.GetName(), ps.node, node, ErrBoundElsewhere)
		default:
			// Our own assumption for another node: its Binding may still
			// be made (the scheduler gave up waiting, or its answer was
			// lost). Releasing it now could hand its cards out twice.
			return nil, nil, fmt.Errorf("pod %s/%s: a bind to node %s has not ended or its outcome is unknown; its cards stay held until the API shows the pod or %s passes: %w",
				pod.GetNamespace(), pod.GetName(), ps.node, ps.deadline.Sub(c.clock.Now()).Round(time.Second), ErrBindInFlight)
		}
	}
	ns, reason, unknown := c.gpuNode(node)
	switch {
	case unknown:
		return nil, nil, fmt.Errorf("node %s: %w", node, ErrUnknownNode)
	case ns == nil:
		return nil, nil, &allocator.FitError{Node: node, Reason: reason}
	}
	return ns, nil, nil
}

// hold records pl, placed on ns's cards as they are now (less the room
// reserved for the pod, which it takes in its place), as pod's assumed
// allocation, with its CPU and memory, and publishes the change; reason
// non-empty says the pod does not fit instead. The caller holds c.mu.
func (c *Cache) hold(pod *PodInfo, ns *nodeState, pl *allocator.Placement, reason string) (*gpushare.Allocation, error) {
	if reason != "" {
		return nil, &allocator.FitError{Node: ns.node.Name, Reason: reason}
	}
	uid := pod.GetUID()
	if ps, ok := c.pods[uid]; ok && ps.state == StateReserved {
		c.remove(uid) // the reservation, on this node or another
	}
	alloc := allocator.Allocation(&ns.node, pod.Demand, pl)
	c.add(uid, &podState{namespace: pod.GetNamespace(), name: pod.GetName(), node: ns.node.Name, state: StateAssumed, ours: true,
		priority: pod.Priority, mpsUser: pod.MPSUser, alloc: alloc, perCard: cardUnitsOf(alloc.PerCard()), deadline: c.clock.Now().Add(c.assumeTTL)})
	c.binding.Store(uid, ns.node.Name)
	if h, ok := c.hosts[uid]; !ok || h.assumed {
		c.setHost(uid, ns.node.Name, pod.MilliCPU, pod.MemoryMiB, true)
	}
	c.observePlaced(pod)
	c.publish()
	return alloc, nil
}

// FinishBinding marks uid's assumed allocation bound (its Binding was
// made). Until the informer shows the pod bound it keeps a deadline: a pod
// the informer never delivers is released then.
func (c *Cache) FinishBinding(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.binding.Delete(uid)
	if ps, ok := c.pods[uid]; ok {
		ps.state = StateBound
		ps.deadline = time.Time{}
		if !ps.confirmed {
			ps.deadline = c.clock.Now().Add(c.assumeTTL)
		}
		if h, ok := c.hosts[uid]; ok && h.assumed {
			h.assumed = false
			c.hosts[uid] = h
		}
	}
}

// Forget releases uid's allocation if it is still only assumed: its bind
// failed and no Binding was made.
func (c *Cache) Forget(uid types.UID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	if ps, ok := c.pods[uid]; ok && ps.state == StateAssumed {
		c.remove(uid)
	}
}

// Expired names a released allocation.
type Expired struct {
	Namespace, Name, Node string
	// Bound: its Binding was made but the informer never showed the pod
	// (it was deleted before the watch delivered it); otherwise the bind
	// never completed.
	Bound bool
	// Reserved: room a preemption kept for the pod, which was not bound
	// in time (Reserve).
	Reserved bool
}

// Expire releases assumed allocations and reserved room whose deadline has
// passed, and bound allocations the informer has not confirmed by theirs,
// and returns them. It also forgets the deletes older than AssumeTTL.
func (c *Cache) Expire() []Expired {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	defer c.publish()
	for key, at := range c.gone {
		if now.Sub(at) > c.assumeTTL {
			delete(c.gone, key)
		}
	}
	var out []Expired
	for uid, ps := range c.pods {
		if ps.deadline.IsZero() || !now.After(ps.deadline) || ps.confirmed {
			continue
		}
		if ps.state == StateReserved && c.awaiting(ps, now) {
			continue
		}
		out = append(out, Expired{Namespace: ps.namespace, Name: ps.name, Node: ps.node, Bound: ps.state == StateBound, Reserved: ps.state == StateReserved})
		c.remove(uid)
		c.dropHost(uid)
	}
	return out
}

// awaiting reports whether reservation ps, past its deadline at now, still
// waits for one of its victims, a pod that holds a node still, and may
// wait on (its limit not reached); its deadline then moves a TTL on, never
// past the limit. The caller holds c.mu.
func (c *Cache) awaiting(ps *podState, now time.Time) bool {
	if ps.rare == nil || !now.Before(ps.rare.limit) {
		return false
	}
	for _, v := range ps.rare.victims {
		if _, ok := c.hosts[v]; ok {
			ps.deadline = now.Add(c.assumeTTL)
			if ps.deadline.After(ps.rare.limit) {
				ps.deadline = ps.rare.limit
			}
			return true
		}
	}
	return false
}

// gpuNode returns name's state if the node has cards and takes new pods;
// otherwise nil and why not, with unknown true for a node the extender has
// not seen (or only as a placeholder). The caller holds c.mu.
func (c *Cache) gpuNode(name string) (ns *nodeState, reason string, unknown bool) {
	ns, ok := c.nodes[name]
	switch {
	case !ok || !ns.seen:
		return nil, "node unknown to the gpushare extender (not yet in its informer cache)", true
	case len(ns.node.Cards) == 0:
		reason := "node reports no GPU memory (" + string(gpushare.ResourceGPUMem) + ")"
		if ns.invErr != "" {
			reason += "; " + ns.invErr
		}
		return nil, reason, false
	case ns.cordonErr != "":
		return nil, ns.cordonErr, false
	}
	return ns, "", false
}

// scorer rates placements for one pod: with a Host for policies that weigh
// CPU and memory, on nodes that report their CPU.
type scorer struct {
	p    allocator.Policy
	hs   allocator.HostScorer // nil when p weighs cards only
	host allocator.Host
}

// newScorer returns pod's scorer, built from the policy inputs in.
func newScorer(in *policyInputs, pod *PodInfo) (*scorer, error) {
	p, err := in.policy(pod.Policy)
	if err != nil {
		return nil, err
	}
	if pod.DRA {
		p = allocator.SliceOrder(p)
	}
	sc := &scorer{p: p, host: allocator.Host{PodMilliCPU: pod.MilliCPU, PodMemoryMiB: pod.MemoryMiB, MaxMilliCPU: in.maxMilliCPU, MaxUnits: in.maxUnits}}
	sc.hs, _ = p.(allocator.HostScorer)
	return sc, nil
}

func (sc *scorer) score(s *nodeSnap, pl *allocator.Placement) float64 {
	if sc.hs == nil || !s.hostKnown {
		return sc.p.NodeScore(&s.node, pl)
	}
	sc.host.FreeMilliCPU, sc.host.FreeMemoryMiB = s.freeMilliCPU, s.freeMemMiB
	return sc.hs.NodeScoreHost(&s.node, pl, &sc.host)
}

// ctxCheckNodes is how many nodes a verb fits between two looks at its
// context (a single-card pod takes no search step, so its budget never
// looks).
const ctxCheckNodes = 256

// stopped returns an error naming pod when ctx has ended before the verb
// examined every node, nil otherwise.
func stopped(ctx context.Context, pod *PodInfo, done, nodes int) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("pod %s/%s: stopped after %d of %d nodes: %w", pod.Namespace, pod.Name, done, nodes, context.Cause(ctx))
	}
	return nil
}

// pinnedNode returns the node of uid's assumption if the pod has one (its
// bind there has not ended, or ended with an unknown outcome) and the node
// is among nodes. A pod kube-scheduler tries again then goes back to that
// node: a second bind there re-sends the Binding with the same cards, which
// settles the first (Assume is idempotent, and a Binding already made
// answers Conflict, then reads back as bound). Sent elsewhere, its bind
// would be refused (ErrBindInFlight) until the assumption expired,
// AssumeTTL later. It takes no lock.
func (c *Cache) pinnedNode(uid types.UID, nodes []string) (string, bool) {
	v, ok := c.binding.Load(uid)
	if !ok {
		return "", false
	}
	node, _ := v.(string)
	return node, slices.Contains(nodes, node)
}

// pinnedTo is Filter's answer for a pod pinned to node (pinnedNode): node
// alone, the other nodes failed with the reason.
func pinnedTo(node string, nodes []string) (fit []string, failed map[string]string) {
	reason := fmt.Sprintf("the pod's bind to node %s has not ended or its outcome is unknown; it is tried on %s again", node, node)
	failed = make(map[string]string, len(nodes)-1)
	for _, n := range nodes {
		if n != node {
			failed[n] = reason
		}
	}
	return []string{node}, failed
}

// Filter splits nodes into those where pod's Demand fits, on the cards its
// constraints allow, and those where it does not, with the reason for each.
// It fails, naming the pod, when no node could take it, and when ctx ends
// before every node was examined. It reads the nodes' published copies
// and takes no lock. The searches of all nodes together spend one request
// budget (allocator.DefaultRequestSteps); nodes it leaves unexamined fail
// with a reason that says so.
func (c *Cache) Filter(ctx context.Context, pod *PodInfo, nodes []string) (fit []string, failed map[string]string, err error) {
	if err := pod.placeable(); err != nil {
		return nil, nil, err
	}
	if node, ok := c.pinnedNode(pod.UID, nodes); ok {
		fit, failed = pinnedTo(node, nodes)
		return fit, failed, nil
	}
	b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
	cr := c.creditFor(pod.UID)
	failed = map[string]string{}
	var pl allocator.Placement // reused across nodes
	for i, name := range nodes {
		if i%ctxCheckNodes == ctxCheckNodes-1 {
			if err := stopped(ctx, pod, i, len(nodes)); err != nil {
				return nil, nil, err
			}
		}
		if _, reason := c.fitSnap(name, pod, cr, allocator.Binpack{}, &pl, b); reason != "" {
			failed[name] = reason
			continue
		}
		fit = append(fit, name)
	}
	return fit, failed, stopped(ctx, pod, len(nodes), len(nodes))
}

// FilterBest is Filter keeping, of the nodes where pod's Demand fits, only
// those Score rates highest (allocator.MaxScore), and of those the first
// allocator.MaxBestNodes in nodes' order: the extender's choice of node
// then decides, and kube-scheduler's own scores only break ties among
// them. The nodes left out are not failed (they fit; they are not the
// best, or not needed). Each node is fitted once.
func (c *Cache) FilterBest(ctx context.Context, pod *PodInfo, nodes []string) (best []string, failed map[string]string, err error) {
	if err := pod.placeable(); err != nil {
		return nil, nil, err
	}
	if node, ok := c.pinnedNode(pod.UID, nodes); ok {
		best, failed = pinnedTo(node, nodes)
		return best, failed, nil
	}
	ev, err := c.evaluate(ctx, pod, nodes)
	if err != nil {
		return nil, nil, err
	}
	defer ev.release()
	failed = ev.failed(nodes)
	lo, hi := ev.scoreRange()
	best = make([]string, 0, min(len(nodes), allocator.MaxBestNodes))
	for i, name := range nodes {
		if ev.fits[i] && allocator.Normalize(ev.raw[i], lo, hi) == allocator.MaxScore {
			if best = append(best, name); len(best) == allocator.MaxBestNodes {
				break
			}
		}
	}
	return best, failed, nil
}

// Score rates each node for pod's Demand with the pod's policy (the
// default when it names none), 0..allocator.MaxScore, parallel to nodes. A
// node where the demand does not fit scores 0. Policies that weigh CPU and
// memory too (allocator.HostScorer) are given the node's free CPU and memory
// and the pod's requests, on nodes that report their CPU.
func (c *Cache) Score(ctx context.Context, pod *PodInfo, nodes []string) ([]int64, error) {
	ev, err := c.evaluate(ctx, pod, nodes)
	if err != nil {
		return nil, err
	}
	defer ev.release()
	lo, hi := ev.scoreRange()
	scores := make([]int64, len(nodes))
	for i := range nodes {
		if ev.fits[i] {
			scores[i] = allocator.Normalize(ev.raw[i], lo, hi)
		}
	}
	return scores, nil
}

// ScoreCPU rates each node for pod, which asks no GPU memory, with the
// pod's policy (the default when it names none), parallel to nodes:
// allocator.MaxScore for the nodes where its CPUScorer rates the pod
// highest (it strands the least GPU memory there), 0 for the others
// (allocator.MarkBest). A node the cache does not know, or that reports no
// CPU, strands nothing. A policy that is no CPUScorer rates every node
// MaxScore (no opinion: kube-scheduler's own scores choose). It takes no
// lock.
func (c *Cache) ScoreCPU(ctx context.Context, pod *PodInfo, nodes []string) ([]int64, error) {
	in := c.inputs.Load()
	p, err := in.policy(pod.Policy)
	if err != nil {
		return nil, err
	}
	raw := make([]float64, len(nodes))
	if cs, ok := p.(allocator.CPUScorer); ok {
		host := allocator.Host{PodMilliCPU: pod.MilliCPU, PodMemoryMiB: pod.MemoryMiB, MaxMilliCPU: in.maxMilliCPU, MaxUnits: in.maxUnits}
		for i, name := range nodes {
			if i%ctxCheckNodes == ctxCheckNodes-1 {
				if err := stopped(ctx, pod, i, len(nodes)); err != nil {
					return nil, err
				}
			}
			s := c.snapOf(name)
			if s == nil || !s.hostKnown {
				continue
			}
			host.FreeMilliCPU, host.FreeMemoryMiB = s.freeMilliCPU, s.freeMemMiB
			raw[i] = cs.NodeScoreCPU(&s.node, &host)
		}
	}
	return allocator.MarkBest(raw), nil
}

// evaluation is what evaluate found of each node of a verb's list, parallel
// to it: whether the pod's Demand fits, with the node's raw score
// (allocator.Policy.NodeScore or NodeScoreHost), or why not. Its slices come
// from evalPool and go back with release, so a verb over thousands of nodes
// allocates none of them (at 15,000 nodes they were most of the 0.76 MB a
// FilterBest allocated, and so of the garbage collections the extender ran
// while it served kube-scheduler).
type evaluation struct {
	raw     []float64
	fits    []bool
	reasons []string // "" where the demand fits
}

// evalPool holds evaluations for reuse.
var evalPool = sync.Pool{New: func() any { return new(evaluation) }}

// newEvaluation returns an evaluation for n nodes, every node not fitting
// yet.
func newEvaluation(n int) *evaluation {
	ev := evalPool.Get().(*evaluation)
	if cap(ev.raw) < n {
		ev.raw, ev.fits, ev.reasons = make([]float64, n), make([]bool, n), make([]string, n)
	}
	ev.raw, ev.fits, ev.reasons = ev.raw[:n], ev.fits[:n], ev.reasons[:n]
	clear(ev.fits)
	return ev
}

// release returns ev to evalPool; ev must not be used after. It drops the
// reasons, so a pooled evaluation keeps no string alive.
func (ev *evaluation) release() {
	clear(ev.reasons)
	evalPool.Put(ev)
}

// failed returns, by node name, why the demand does not fit on each node
// of nodes (ev's list) where it does not.
func (ev *evaluation) failed(nodes []string) map[string]string {
	failed := map[string]string{}
	for i, ok := range ev.fits {
		if !ok {
			failed[nodes[i]] = ev.reasons[i]
		}
	}
	return failed
}

// scoreRange returns the lowest and the highest raw score of the nodes
// where the demand fits, the range allocator.Normalize maps to
// 0..allocator.MaxScore (as allocator.NormalizeScores does over them).
func (ev *evaluation) scoreRange() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for i, ok := range ev.fits {
		if ok {
			lo, hi = min(lo, ev.raw[i]), max(hi, ev.raw[i])
		}
	}
	return lo, hi
}

// evaluate fits pod's Demand on each of nodes with the pod's policy,
// reading the nodes' published copies without a lock and spending one
// request budget, as Filter does, and records each node's raw score or why
// the demand does not fit there. A pod that needs no search
// (allocator.Searches: one container, one card) on a long list of nodes is
// fitted by several goroutines at once (fitChunk). The caller releases the
// evaluation.
func (c *Cache) evaluate(ctx context.Context, pod *PodInfo, nodes []string) (*evaluation, error) {
	if err := pod.placeable(); err != nil {
		return nil, err
	}
	in := c.inputs.Load() // one policy for every node, whichever goroutine fits it
	if _, err := in.policy(pod.Policy); err != nil {
		return nil, err
	}
	cr := c.creditFor(pod.UID) // room reserved for the pod (preempt.go) is free to it
	ev := newEvaluation(len(nodes))
	workers := 1
	if !allocator.Searches(pod.Demand) {
		workers = min(runtime.GOMAXPROCS(0), len(nodes)/parallelMinNodes)
	}
	idx := c.index.Load()
	var err error
	if workers <= 1 {
		var f *fitter
		if f, err = newFitter(in, pod); err == nil {
			b := allocator.NewBudget(ctx, allocator.DefaultRequestSteps)
			err = c.fitChunk(ctx, idx, f, pod, cr, nodes, 0, len(nodes), b, ev)
		}
	} else {
		// The workers take parallelChunk nodes at a time, in turn: on a
		// busy machine one that gets less of a processor fits fewer, where
		// fixed shares left the verb waiting for the slowest.
		var next atomic.Int64
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for w := range workers {
			wg.Go(func() {
				f, err := newFitter(in, pod)
				for err == nil {
					lo := int(next.Add(parallelChunk)) - parallelChunk
					if lo >= len(nodes) {
						return
					}
					if err = stopped(ctx, pod, lo, len(nodes)); err == nil {
						err = c.fitChunk(ctx, idx, f, pod, cr, nodes, lo, min(lo+parallelChunk, len(nodes)), nil, ev)
					}
				}
				errs[w] = err
			})
		}
		wg.Wait()
		err = errors.Join(errs...)
	}
	if err == nil {
		err = stopped(ctx, pod, len(nodes), len(nodes))
	}
	if err != nil {
		ev.release()
		return nil, err
	}
	return ev, nil
}

// parallelMinNodes is how many nodes each goroutine of evaluate fits at
// least: fewer are not worth starting one for (a node takes a few hundred
// nanoseconds).
const parallelMinNodes = 1024

// parallelChunk is how many nodes a goroutine of evaluate takes at a time:
// a multiple of fitBlock, and ctxCheckNodes, as evaluate looks at the
// context before each.
const parallelChunk = ctxCheckNodes

// fitter is what one goroutine of evaluate fits with: its own scorer (a
// policy keeps memos) and placement, reused across nodes.
type fitter struct {
	sc *scorer
	pl allocator.Placement
}

func newFitter(in *policyInputs, pod *PodInfo) (*fitter, error) {
	sc, err := newScorer(in, pod)
	if err != nil {
		return nil, err
	}
	return &fitter{sc: sc}, nil
}

// fitChunk fits pod on nodes[lo:hi], found in idx, with f, spending b
// (nil for a pod that takes no search step), with cr the room reserved
// for the pod (nil when none) free to it, and records in ev, at each
// node's index, whether it fits and its raw score, or why not. Several run
// at once on disjoint ranges (cr is only read).
func (c *Cache) fitChunk(ctx context.Context, idx *nodeIndex, f *fitter, pod *PodInfo, cr *credit, nodes []string, lo, hi int, b *allocator.Budget, ev *evaluation) error {
	raw, fits, reasons := ev.raw, ev.fits, ev.reasons
	// Block by block, first find each node's published copy and screen
	// out the nodes that take no GPU pod: a short loop, so the processor
	// overlaps the memory loads of many nodes (the index and the copies
	// are spread over the heap; fitting them one at a time waited for each
	// in turn, most of the verb's time at 5,000 nodes). Then fit the
	// block's others while their copies are still in the processor's
	// cache.
	var snaps [fitBlock]*nodeSnap
	sc, pl := f.sc, &f.pl
	for blo := lo; blo < hi; blo += fitBlock {
		bhi := min(blo+fitBlock, hi)
		if blo > lo && (blo-lo)%ctxCheckNodes == 0 {
			if err := stopped(ctx, pod, blo, len(nodes)); err != nil {
				return err
			}
		}
		for i := blo; i < bhi; i++ {
			var s *nodeSnap
			if slot := idx.lookup(nodes[i]); slot != nil {
				s = slot.snap.Load()
			}
			snaps[i-blo], reasons[i], _ = gpuOf(s)
		}
		for i := blo; i < bhi; i++ {
			s := cr.on(snaps[i-blo]).forMPS(pod.MPSUser)
			if s == nil {
				continue
			}
			if reason := fitReason(&s.node, s.source, s.invErr, pod, sc.p, pl, b); reason != "" {
				reasons[i] = reason
				continue
			}
			raw[i], fits[i] = sc.score(s, pl), true
		}
	}
	return nil
}

// fitBlock is how many nodes fitChunk looks up before it fits them: enough
// for the processor to overlap their loads, few enough that their copies
// stay in its cache until they are fitted. ctxCheckNodes is a multiple.
const fitBlock = 64

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
