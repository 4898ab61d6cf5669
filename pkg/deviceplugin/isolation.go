package deviceplugin

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/isolation"
)

// Enforcer gives a container's response the edits of its cards' isolation
// (isolation.Enforcer).
type Enforcer interface {
	Edits(ctx context.Context, shares []isolation.Share) (*isolation.Edits, error)
}

var _ Enforcer = (*isolation.Enforcer)(nil)

// setupIsolation chooses each card's mode for cfg.Isolation and starts what
// the modes need, through isolation.Setup, and sets cards[i].Isolation. An
// explicit cfg.Isolation the node cannot enforce is an error naming what is
// missing. runtimeCDIErr, from runtimeCDI, says why the container runtime
// would not apply CDI devices, nil when it would. Without them there is no
// driver mode. stop ends the MPS daemons. event, when set, reports an MPS
// daemon restart on the node.
func setupIsolation(ctx context.Context, cfg *Config, gpus GPUs, devs []gpu.Device, cards []Card, metrics *Metrics,
	runtimeCDIErr error, event func(eventType, reason, msg string)) (e *isolation.Enforcer, stop func(), err error) {
	e, modes, stop, err := isolation.Setup(ctx, isolation.SetupConfig{
		Node: cfg.NodeName, Request: cfg.Isolation, Fake: cfg.FakeGPUs != "", FakeDriver: cfg.FakeDriver,
		CgroupRoot: cfg.CgroupRoot, MPSControl: cfg.MPSControl, MPSRoot: cfg.MPSRoot, CDIDir: cfg.CDIDir, CDIHook: cfg.CDIHook,
		RuntimeCDIErr: runtimeCDIErr, MPSDaemonsInProcess: cfg.MPSDaemons == MPSDaemonsPlugin,
		OnMPSRestart: func(uuid string, err error) {
			metrics.MPSRestarted(uuid)
			if event != nil {
				event(corev1.EventTypeWarning, "MPSDaemonRestarted", fmt.Sprintf("MPS control daemon of GPU %s restarted: %v", uuid, err))
			}
		},
	}, gpus, devs)
	if err != nil {
		return nil, nil, err
	}
	for i := range cards {
		cards[i].Isolation = modes[i]
	}
	return e, stop, nil
}

// runtimeCDI returns why the node's container runtime would not apply the
// CDI devices kubelet passes it, or nil when it would. cfg.RuntimeCDI
// decides: the operator's word, or isolation.RuntimeAppliesCDI on the
// runtime and version the Node reports. A Node that cannot be read counts
// as a runtime that does not.
func runtimeCDI(ctx context.Context, cfg *Config, nodes NodeGetter) error {
	switch isolation.RuntimeCDI(cfg.RuntimeCDI) {
	case isolation.RuntimeCDIOn:
		return nil
	case isolation.RuntimeCDIOff:
		return fmt.Errorf("%w (--runtime-cdi=false)", isolation.ErrRuntimeNoCDI)
	}
	node, err := nodes.GetNode(ctx, cfg.NodeName)
	if err != nil {
		return fmt.Errorf("%w: reading node %s for its container runtime: %w (--runtime-cdi=true says it does)", isolation.ErrRuntimeNoCDI, cfg.NodeName, err)
	}
	return isolation.RuntimeAppliesCDI(node.Status.NodeInfo.ContainerRuntimeVersion)
}

// NodeGetter reads a Node (ClientAPI).
type NodeGetter interface {
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
}

// retainMinAge spares CDI limit devices and MPS shares younger than this
// from pruning: an Allocate may have added one for a container whose grant
// the prune did not see yet.
const retainMinAge = time.Minute

// retainIsolation brings the isolation state in step with the containers
// h believes hold cards, sparing what was added within minAge. It drops
// driver mode's CDI limit devices that none names, by
// isolation.Enforcer.PruneCDI. retainMPS moves each mps card's default
// pinned limit to the largest share it serves. unit is the node's. Errors
// are logged: what failed stays as it was.
func retainIsolation(ctx context.Context, h *handoff.Handoff, e *isolation.Enforcer, unit string, minAge time.Duration) {
	held := h.HeldShares()
	limits := make([][]isolation.Limit, len(held))
	for i, hs := range held {
		for _, sh := range hs {
			limits[i] = append(limits[i], isolation.Limit{Index: sh.Index, MiB: MiB(sh.Units, unit)})
		}
	}
	n, err := e.PruneCDI(limits, minAge)
	switch {
	case err != nil:
		klog.FromContext(ctx).Error(err, "Pruning the CDI spec's limit devices")
	case n > 0:
		klog.FromContext(ctx).V(2).Info("Pruned CDI limit devices no container holds", "removed", n)
	}
	retainMPS(ctx, held, e, unit, minAge)
}

// retainMPS tells mps mode the shares h.HeldShares holds on its cards,
// through isolation.Enforcer.RetainMPS. Each card's default pinned limit
// moves to its largest share. A card with shares gets its daemon back if it
// is gone. Errors are logged.
func retainMPS(ctx context.Context, held [][]gpushare.DeviceShare, e *isolation.Enforcer, unit string, minAge time.Duration) {
	shares := make([][]isolation.Share, len(held))
	for i, hs := range held {
		for _, sh := range hs {
			shares[i] = append(shares[i], isolation.Share{UUID: sh.UUID, MiB: MiB(sh.Units, unit)})
		}
	}
	if err := e.RetainMPS(ctx, shares, minAge); err != nil {
		klog.FromContext(ctx).Error(err, "Setting the MPS default pinned limits to the largest share of each card")
	}
}
