package handoff

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// ErrNoMatch marks an Allocate or GetPreferredAllocation for which no pod
// on the node waits: kubelet reports it as the pod's admission failure.
var ErrNoMatch = errors.New("no waiting pod matches")

// DefaultGrace is how long a grant made by Allocate stands before the
// absence of its devices in PodResources may revoke it (kubelet records
// the devices only after Allocate returns).
const DefaultGrace = 10 * time.Second

// Card is one card as the plugin advertises it.
type Card struct {
	gpushare.Card
	// Units is the card's memory in the node's unit; the card has this many
	// device IDs, UUID::0 .. UUID::Units-1.
	Units int64
	// Isolation is how the card enforces each container's share (set from
	// --isolation at start; "" is none).
	Isolation gpushare.Isolation
}

// KubeletPod is a pod as kubelet's PodResources List reports it.
type KubeletPod struct {
	Namespace, Name string
	// Containers: name -> the aliyun.com/gpu-mem device IDs kubelet holds
	// for it (empty: none yet). PodResources lists app containers and
	// restartable init containers only, never plain init containers.
	Containers map[string][]string
}

// KubeletPods reads kubelet's PodResources API.
type KubeletPods interface {
	// List returns kubelet's active pods: those admitted, and the one it is
	// admitting (kubelet adds a pod to its pod manager before admission).
	// It bounds its own wait: the handoff calls it while kubelet admits a
	// container and from the verifier, without a deadline of its own.
	List(ctx context.Context) ([]KubeletPod, error)
}

// NodePodLister reads a node's pods from the API server, for the pods
// kubelet admits before this plugin's informer has delivered them.
type NodePodLister interface {
	// ListNodePods returns the pods whose spec.nodeName is node, as the
	// API server holds them now (a consistent read, not a cache's).
	ListNodePods(ctx context.Context, node string) ([]corev1.Pod, error)
}

// Recorder reports events on pods.
type Recorder interface {
	Eventf(pod *corev1.Pod, eventtype, reason, messageFmt string, args ...any)
}

// containerKey names one container of one pod.
type containerKey struct {
	uid  types.UID
	name string
}

// podEntry is a pod on this node that asks aliyun.com/gpu-mem.
type podEntry struct {
	uid             types.UID
	namespace, name string
	// alloc is the pod's allocation annotation as last seen; nil when it
	// has none or it is unusable (problem says why).
	alloc   *gpushare.Allocation
	problem string
	// assumeTime is ALIYUN_COM_GPU_MEM_ASSUME_TIME (unix ns, bind time); it
	// orders otherwise equal candidates, oldest first.
	assumeTime int64
	// index is ALIYUN_COM_GPU_MEM_IDX, -1 when absent or invalid, and
	// devMem ALIYUN_COM_GPU_MEM_DEV, 0 when absent: the card and its size
	// as Aliyun's scheduler extender wrote them, for legacy pods.
	index  int
	devMem int64
	// admitted: the pod runs (phase Running), so kubelet holds its devices.
	admitted bool
	// constraints are the cards the pod's gpushare.io/gpu-* annotations
	// allow (nil: any); constraintsErr says why they are invalid. A
	// container is relocated only to cards they allow.
	constraints    *gpushare.CardConstraints
	constraintsErr error
	// annotations holds the current values of the annotations the plugin
	// writes, to patch only what differs.
	annotations map[string]string
	// users: container name -> its runAsUser (runAsUsers); a container
	// without one is absent. An MPS card serves one user at a time.
	users map[string]int64
}

func (e *podEntry) ref() string { return e.namespace + "/" + e.name }

// grant is what one container holds, as far as the plugin knows.
type grant struct {
	// ids are the device IDs, sorted; nil for a grant restored from an
	// ASSIGNED=true annotation after a plugin restart.
	ids []string
	// shares are the cards the IDs are on, in card index order.
	shares []gpushare.DeviceShare
	// confirmed: kubelet's PodResources reported these IDs for this
	// container. Unconfirmed grants come from Allocate (a decision that
	// kubelet may have applied to another pod) or from an annotation.
	confirmed bool
	// at is when the grant was made.
	at time.Time
}

// steer is the last GetPreferredAllocation answer: the IDs it preferred
// and the container it chose them for. kubelet admits one container at a
// time, so it is valid for the next Allocate only.
type steer struct {
	ids []string // sorted
	ck  containerKey
}

// Assignment is what Allocate decided for one container.
type Assignment struct {
	Pod       types.UID
	Namespace string
	PodName   string
	Container string
	// Shares are the cards the container runs on (those of its device
	// IDs), with units per card.
	Shares []gpushare.DeviceShare
	// PodUnits is the pod's total (gpushare.Allocation.Total) after this
	// assignment.
	PodUnits int64
	// Relocated is true when Shares differ from the pod's annotation, which
	// the plugin then repairs.
	Relocated bool
	// Enforced: the pod asks gpushare.io/isolation: enforced, so the
	// container may not run with advisory limits.
	Enforced bool
}

// Config configures a Handoff.
type Config struct {
	Node string
	// Unit of the node (gpushare.UnitGiB or UnitMiB).
	Unit  string
	Cards []Card
	// Kubelet is the PodResources client; nil disables hints and checks.
	Kubelet KubeletPods
	// API reads the node's pods when the informer lags (catchUp); may be
	// nil.
	API NodePodLister
	// Notify is called with a pod whose annotations may need a patch.
	Notify func(types.UID)
	// Recorder reports repairs on pods; may be nil.
	Recorder Recorder
	// Grace: DefaultGrace when zero.
	Grace time.Duration
	// Clock: the real clock when nil.
	Clock clock.PassiveClock
}

// Handoff matches the device IDs kubelet allocates to the pod containers
// whose allocation annotation asked for them; see the package doc. All state
// sits behind one mutex. Informer handlers call UpsertPod and DeletePod. The
// gRPC server calls Prefer and Allocate, the verifier calls Verify, and the
// annotation writer calls Desired.
//
// A container's grant (keyed by pod UID and container name):
//
//	          Allocate                     PodResources shows these IDs
//	(none) ─────────────► tentative ─────────────────────────────────► confirmed
//	  ▲  ▲                    │                                           │
//	  │  │  kubelet holds the │ IDs for another pod's container           │
//	  │  └────────────────────┘ (the match was a guess), or shows none    │
//	  │                         after the grace period                    │
//	  │  pod deleted, Succeeded or Failed; kubelet shows other IDs        │
//	  └───────────────────────────────────────────────────────────────────┘
//
// A restarted plugin also makes restored grants, when it first sees a pod
// with ASSIGNED=true. They carry no IDs. They go when kubelet lists the pod
// without devices for the container, and become confirmed when it lists
// them. A pod waits while one of its containers has no grant. The first
// such container, in kubelet's order, is the one the next calls are for.
type Handoff struct {
	// node, unit and cards never change; they are read without mu.
	node     string
	unit     string
	cards    cardSet
	kubelet  KubeletPods
	api      NodePodLister
	notify   func(types.UID)
	recorder Recorder
	grace    time.Duration
	clock    clock.PassiveClock

	mu sync.Mutex
	// pods: UID -> pods on this node that ask gpu-mem.
	pods map[types.UID]*podEntry
	// byName: "namespace/name" -> UID of pods.
	byName map[string]types.UID
	// grants: container -> what it holds.
	grants map[containerKey]*grant
	// owner: device ID -> the container whose grant holds it last.
	owner map[string]containerKey
	// steer: the last preference, valid for the next Allocate; nil if none.
	steer *steer
	// legacy: UID -> the device IDs of the previous device plugin that
	// kubelet holds for that pod, sorted (see legacy.go). Such pods are
	// never matched, granted or patched.
	legacy map[types.UID][]string
	// legacyChanged is signalled (buffered, never blocks) when legacy
	// changes.
	legacyChanged chan struct{}
	// stats counts decisions, for tests (Stats).
	stats Stats
}

// Stats counts the handoff's decisions since start.
type Stats struct {
	// Allocations answered; Steered of them matched the preceding
	// GetPreferredAllocation; Reused matched by an init container's IDs.
	Allocations, Steered, Reused int
	// Relocated: containers placed on other cards than annotated.
	Relocated int
	// Corrected: grants moved to another pod after PodResources showed
	// that kubelet gave the IDs to it.
	Corrected int
	// Revoked: grants taken back because their Allocate call failed.
	Revoked int
}

// New returns an empty handoff.
func New(cfg Config) *Handoff {
	h := &Handoff{
		node: cfg.Node, unit: cfg.Unit, cards: cardSet{node: cfg.Node, byUUID: map[string]Card{}}, kubelet: cfg.Kubelet, api: cfg.API,
		notify: cfg.Notify, recorder: cfg.Recorder, grace: cfg.Grace, clock: cfg.Clock,
		pods: map[types.UID]*podEntry{}, byName: map[string]types.UID{},
		grants: map[containerKey]*grant{}, owner: map[string]containerKey{},
		legacy: map[types.UID][]string{}, legacyChanged: make(chan struct{}, 1),
	}
	for _, c := range cfg.Cards {
		h.cards.byUUID[c.UUID] = c
	}
	if h.notify == nil {
		h.notify = func(types.UID) {}
	}
	if h.grace <= 0 {
		h.grace = DefaultGrace
	}
	if h.clock == nil {
		h.clock = clock.RealClock{}
	}
	return h
}

// Stats returns the decision counters.
func (h *Handoff) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.stats
}

// drop removes a grant. The caller holds h.mu.
func (h *Handoff) drop(ck containerKey) {
	g, ok := h.grants[ck]
	if !ok {
		return
	}
	for _, id := range g.ids {
		if h.owner[id] == ck {
			delete(h.owner, id)
		}
	}
	delete(h.grants, ck)
}

// give records a grant. The caller holds h.mu.
func (h *Handoff) give(ck containerKey, g *grant) {
	h.drop(ck)
	h.grants[ck] = g
	for _, id := range g.ids {
		h.owner[id] = ck
	}
}

// next returns the index in e.alloc.Containers of the first container
// without a grant, in kubelet's allocation order (init containers, then
// app containers, each in spec order), or -1. A legacy pod waits for
// nothing: kubelet admitted it through the previous plugin.
func (h *Handoff) next(e *podEntry) int {
	if e.alloc == nil || h.legacy[e.uid] != nil {
		return -1
	}
	for i, c := range e.alloc.Containers {
		if h.grants[containerKey{e.uid, c.Name}] == nil {
			return i
		}
	}
	return -1
}

// HeldShares returns the cards of every container the plugin believes
// holds some (every grant, confirmed or not), each in card index order.
func (h *Handoff) HeldShares() [][]gpushare.DeviceShare {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([][]gpushare.DeviceShare, 0, len(h.grants))
	for _, g := range h.grants {
		out = append(out, slices.Clone(g.shares))
	}
	return out
}

// Waiting returns the number of pods with a container not yet allocated.
func (h *Handoff) Waiting() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, e := range h.pods {
		if h.next(e) >= 0 {
			n++
		}
	}
	return n
}

// Grant reports what the plugin believes a container holds (its cards)
// and whether kubelet confirmed it; for tests and inspection.
func (h *Handoff) Grant(uid types.UID, container string) (shares []gpushare.DeviceShare, confirmed, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	g := h.grants[containerKey{uid, container}]
	if g == nil {
		return nil, false, false
	}
	return slices.Clone(g.shares), g.confirmed, true
}

func (h *Handoff) refOf(uid types.UID) string {
	if e := h.pods[uid]; e != nil {
		return e.ref()
	}
	return string(uid)
}

func (h *Handoff) isInit(ck containerKey) bool {
	e := h.pods[ck.uid]
	if e == nil || e.alloc == nil {
		return false
	}
	for _, c := range e.alloc.Containers {
		if c.Name == ck.name {
			return c.Init
		}
	}
	return false
}

func containerTotal(c gpushare.ContainerAllocation) int64 {
	var t int64
	for _, d := range c.Devices {
		t += d.Units
	}
	return t
}
