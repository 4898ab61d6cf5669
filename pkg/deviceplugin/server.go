package deviceplugin

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/isolation"
)

// Device list strategies: how a container is given its cards. The NVIDIA
// container toolkit's hook reads NVIDIA_VISIBLE_DEVICES, which an image or
// a pod's env can set to "all". Once the toolkit ignores that variable for
// unprivileged containers, volume-mounts and cdi-cri name the cards where a
// container cannot (docs/design/device-plugin.md).
const (
	// StrategyEnvvar sets NVIDIA_VISIBLE_DEVICES=<UUIDs> for the NVIDIA
	// container runtime.
	StrategyEnvvar = "envvar"
	// StrategyVolumeMounts mounts /dev/null at
	// /var/run/nvidia-container-devices/<UUID> for each card, which the
	// toolkit reads with accept-nvidia-visible-devices-as-volume-mounts =
	// true. It sets NVIDIA_VISIBLE_DEVICES to that directory, which names no
	// card, as NVIDIA's own device plugin does.
	StrategyVolumeMounts = "volume-mounts"
	// StrategyCDIAnnotations sets the CDI annotation
	// cdi.k8s.io/gpushare_gpu-mem=nvidia.com/gpu=<UUID>,... for a runtime
	// with CDI and a spec that names devices by UUID, as
	// nvidia-ctk cdi generate --device-name-strategy=uuid writes. It sets
	// NVIDIA_VISIBLE_DEVICES=void, so images that set "all" get nothing more.
	StrategyCDIAnnotations = "cdi-annotations"
	// StrategyCDICRI puts nvidia.com/gpu=<UUID> in the response's CDI
	// devices, which kubelet passes to the runtime in the CRI request. It
	// needs containerd 1.7+ or CRI-O with CDI enabled, and the same CDI spec
	// as above. It sets NVIDIA_VISIBLE_DEVICES=void.
	StrategyCDICRI = "cdi-cri"
)

// Strategies are the device list strategies, the default first.
var Strategies = []string{StrategyEnvvar, StrategyVolumeMounts, StrategyCDIAnnotations, StrategyCDICRI}

// Container environment set by Allocate.
const (
	EnvVisibleDevices = gpushare.EnvVisibleDevices
	// EnvContainerMem is the container's units (all its cards together).
	EnvContainerMem = gpushare.EnvContainerMem
	// EnvMPSLimit is the per-device memory limit an MPS server enforces:
	// "0=8G" (GiB) or "0=8192M" (MiB), one entry per visible device.
	EnvMPSLimit = gpushare.EnvMPSLimit
	// cdiAnnotation is the CDI annotation key for StrategyCDIAnnotations.
	cdiAnnotation = "cdi.k8s.io/gpushare_gpu-mem"
	// cdiKind is the CDI kind of the cards in the spec that
	// nvidia-ctk cdi generate writes; a card is cdiKind=<UUID>.
	cdiKind = "nvidia.com/gpu"
	// volumeMountsRoot is where StrategyVolumeMounts mounts one /dev/null
	// per card, named by its UUID: the NVIDIA container toolkit's
	// device-list-as-volume-mounts directory.
	volumeMountsRoot = "/var/run/nvidia-container-devices"
	// visibleNone is the NVIDIA_VISIBLE_DEVICES value that gives a
	// container no card through the toolkit.
	visibleNone = "void"
)

// Handoffer is what the gRPC server needs from the handoff.
type Handoffer interface {
	Prefer(ctx context.Context, available, mustInclude []string, size int) ([]string, error)
	Allocate(ctx context.Context, ids []string) (*handoff.Assignment, error)
	// Revoke takes back the grant Allocate made for a, when the Allocate
	// call that made it fails after all: kubelet then records nothing.
	Revoke(ctx context.Context, a *handoff.Assignment)
}

// Server is the DevicePlugin gRPC service for aliyun.com/gpu-mem.
type Server struct {
	pluginapi.UnimplementedDevicePluginServer

	handoff  Handoffer
	cards    map[string]Card // UUID -> card
	unit     string
	strategy string
	logger   klog.Logger
	// afterAllocate runs after every successful Allocate (the verifier's
	// trigger); may be nil.
	afterAllocate func()
	// enforcer adds each container's isolation edits; nil: none (the
	// advisory environment alone).
	enforcer Enforcer

	mu sync.Mutex
	// unhealthy: UUIDs of the cards reported Unhealthy.
	unhealthy map[string]bool
	// adopted: card UUID -> device IDs of the previous device plugin
	// advertised as that card's units (Adoption.ByCard).
	adopted map[string][]string
	// devices is the current ListAndWatch list.
	devices []*pluginapi.Device
	// changed is closed and replaced whenever devices changes.
	changed chan struct{}
}

var (
	_ pluginapi.DevicePluginServer = (*Server)(nil)
	_ Handoffer                    = (*handoff.Handoff)(nil)
)

// NewServer returns a server advertising every unit of cards, all healthy.
func NewServer(logger klog.Logger, h Handoffer, cards []Card, unit, strategy string, afterAllocate func()) *Server {
	s := &Server{handoff: h, cards: map[string]Card{}, unit: unit, strategy: strategy, logger: logger,
		afterAllocate: afterAllocate, changed: make(chan struct{})}
	for _, c := range cards {
		s.cards[c.UUID] = c
	}
	s.SetHealth(nil)
	return s
}

// SetEnforcer makes Allocate add each container's isolation edits. Call it
// before serving.
func (s *Server) SetEnforcer(e Enforcer) { s.enforcer = e }

// SetHealth re-advertises every unit, those of the cards in unhealthy
// (UUIDs) as Unhealthy, and wakes the ListAndWatch streams.
func (s *Server) SetHealth(unhealthy map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unhealthy = unhealthy
	s.rebuild()
}

// SetAdopted re-advertises every card with the given device IDs of the
// previous device plugin as its units, in place of as many of its own.
// adopted is card UUID -> IDs, as Adoption.ByCard gives. It wakes the
// ListAndWatch streams. A card of 16 units with 6 adopted IDs is advertised
// as UUID::0 .. UUID::9 and those 6; one with more adopted IDs than units as
// those IDs alone.
func (s *Server) SetAdopted(adopted map[string][]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.adopted = adopted
	s.rebuild()
}

// rebuild computes the device list and wakes the streams. The caller
// holds s.mu.
func (s *Server) rebuild() {
	var cards []Card
	for _, c := range s.cards {
		cards = append(cards, c)
	}
	sort.Slice(cards, func(i, j int) bool { return cards[i].Index < cards[j].Index })
	var devs []*pluginapi.Device
	for _, c := range cards {
		health := pluginapi.Healthy
		if s.unhealthy[c.UUID] {
			health = pluginapi.Unhealthy
		}
		adopted := s.adopted[c.UUID]
		for k := int64(0); k < c.Units-int64(len(adopted)); k++ {
			devs = append(devs, &pluginapi.Device{ID: handoff.DeviceID(c.UUID, k), Health: health})
		}
		for _, id := range adopted {
			devs = append(devs, &pluginapi.Device{ID: id, Health: health})
		}
	}
	s.devices = devs
	close(s.changed)
	s.changed = make(chan struct{})
}

// GetDevicePluginOptions asks kubelet to call GetPreferredAllocation.
func (s *Server) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the full device list, then again on every change,
// until kubelet hangs up or the gRPC server stops (which cancels the
// stream's context).
func (s *Server) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	for {
		s.mu.Lock()
		devs, changed := s.devices, s.changed
		s.mu.Unlock()
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
			return fmt.Errorf("sending the device list: %w", err)
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return nil
		}
	}
}

// GetPreferredAllocation steers kubelet to the cards of the container it
// is most likely admitting.
func (s *Server) GetPreferredAllocation(ctx context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	ctx = klog.NewContext(ctx, s.logger)
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.ContainerRequests {
		ids, err := s.handoff.Prefer(ctx, cr.AvailableDeviceIDs, cr.MustIncludeDeviceIDs, int(cr.AllocationSize))
		if err != nil {
			s.logger.Error(err, "GetPreferredAllocation failed", "units", cr.AllocationSize)
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Allocate gives each container the cards its device IDs are on.
func (s *Server) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	ctx = klog.NewContext(ctx, s.logger)
	resp := &pluginapi.AllocateResponse{}
	// granted: this call's grants, taken back if a later container fails,
	// since kubelet then records none of the call's devices.
	var granted []*handoff.Assignment
	revoke := func() {
		for _, a := range granted {
			s.handoff.Revoke(ctx, a)
		}
	}
	for _, cr := range req.ContainerRequests {
		a, err := s.handoff.Allocate(ctx, cr.DevicesIds)
		if err != nil {
			revoke()
			s.logger.Error(err, "Allocate failed", "units", len(cr.DevicesIds))
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		granted = append(granted, a)
		r := s.containerResponse(a)
		if err := s.enforce(ctx, a, r); err != nil {
			revoke()
			s.logger.Error(err, "Allocate failed: enforcing the memory limit", "pod", a.Namespace+"/"+a.PodName, "container", a.Container)
			return nil, status.Error(codes.FailedPrecondition, err.Error())
		}
		resp.ContainerResponses = append(resp.ContainerResponses, r)
	}
	if s.afterAllocate != nil {
		s.afterAllocate()
	}
	return resp, nil
}

// containerResponse builds the environment and, by the device list
// strategy, the mounts, CDI annotation or CDI devices for an assignment.
func (s *Server) containerResponse(a *handoff.Assignment) *pluginapi.ContainerAllocateResponse {
	shares := make([]gpushare.EnvShare, len(a.Shares))
	uuids := make([]string, len(a.Shares))
	for i, sh := range a.Shares {
		shares[i] = gpushare.EnvShare{UUID: sh.UUID, Index: sh.Index, Units: sh.Units}
		uuids[i] = sh.UUID
	}
	env := gpushare.ContainerEnv(shares, a.PodUnits, s.cards[a.Shares[0].UUID].Units, s.unit)
	r := &pluginapi.ContainerAllocateResponse{Envs: env}
	var cdiNames []string
	for _, u := range uuids {
		cdiNames = append(cdiNames, cdiKind+"="+u)
	}
	switch s.strategy {
	case StrategyVolumeMounts:
		env[EnvVisibleDevices] = volumeMountsRoot
		for _, u := range uuids {
			r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: volumeMountsRoot + "/" + u, HostPath: "/dev/null", ReadOnly: true})
		}
	case StrategyCDIAnnotations:
		env[EnvVisibleDevices] = visibleNone
		r.Annotations = map[string]string{cdiAnnotation: strings.Join(cdiNames, ",")}
	case StrategyCDICRI:
		env[EnvVisibleDevices] = visibleNone
		for _, n := range cdiNames {
			r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: n})
		}
	}
	return r
}

// enforce adds the isolation edits of a's cards to r. The environment
// overrides the advisory CUDA_MPS_PINNED_DEVICE_MEM_LIMIT in mps mode. The
// MPS directories are mounted. Driver mode's CDI device goes in the CDI
// annotation under StrategyCDIAnnotations, else in the CRI request's CDI
// devices.
func (s *Server) enforce(ctx context.Context, a *handoff.Assignment, r *pluginapi.ContainerAllocateResponse) error {
	if s.enforcer == nil {
		return nil
	}
	shares := make([]isolation.Share, len(a.Shares))
	for i, sh := range a.Shares {
		shares[i] = isolation.Share{UUID: sh.UUID, MiB: MiB(sh.Units, s.unit)}
	}
	ed, err := s.enforcer.Edits(ctx, shares)
	if err != nil {
		return err
	}
	if a.Enforced && !ed.Mode.Enforced() {
		return fmt.Errorf("pod %s/%s asks %s: %s, and container %s would run with advisory limits on %s (a container on several cards needs them all in driver mode)",
			a.Namespace, a.PodName, gpushare.AnnotationIsolation, gpushare.IsolationEnforced, a.Container, handoff.DescribeShares(a.Shares))
	}
	for k, v := range ed.Env {
		r.Envs[k] = v
	}
	for _, m := range ed.Mounts {
		r.Mounts = append(r.Mounts, &pluginapi.Mount{ContainerPath: m.ContainerPath, HostPath: m.HostPath, ReadOnly: m.ReadOnly})
	}
	for _, name := range ed.CDIDevices {
		if s.strategy == StrategyCDIAnnotations {
			r.Annotations[cdiAnnotation] += "," + name
			continue
		}
		r.CdiDevices = append(r.CdiDevices, &pluginapi.CDIDevice{Name: name})
	}
	return nil
}

// PreStartContainer is not required (see GetDevicePluginOptions).
func (s *Server) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
