// Package aliyunplugin is a test double of Aliyun's gpushare-device-plugin
// (github.com/AliyunContainerService/gpushare-device-plugin, as of commit
// 45fb8b8), written from its documented behaviour, for the migration tests:
// it is what kubelet and the API see of that plugin, not its code.
//
//   - It registers aliyun.com/gpu-mem over the socket aliyungpushare.sock
//     and advertises, for every card, as many devices as the FIRST card has
//     units (memory ÷ 1024 in GiB), IDs "<UUID>-_-<n>", all healthy
//     (pkg/gpu/nvidia/nvidia.go getDevices, generateFakeDeviceID). It
//     offers no preferred allocation: kubelet picks any free IDs.
//   - Allocate ignores which IDs kubelet chose. It sums the IDs of the
//     request, lists the pods bound to its node in phase Pending that ask
//     aliyun.com/gpu-mem (the app containers' limits), carry
//     ALIYUN_COM_GPU_MEM_ASSUME_TIME and have ALIYUN_COM_GPU_MEM_ASSIGNED
//     "false", orders them by ASSUME_TIME, oldest first, and takes the first
//     whose app containers ask that many units in all
//     (pkg/gpu/nvidia/allocate.go, podmanager.go getCandidatePods,
//     podutils.go isGPUMemoryAssumedPod). The container runs on the card
//     ALIYUN_COM_GPU_MEM_IDX names: NVIDIA_VISIBLE_DEVICES=<index>, and
//     ALIYUN_COM_GPU_MEM_IDX, _POD (the request's units), _CONTAINER, _DEV
//     (the first card's units). It then patches the pod ASSIGNED "true" and
//     ASSUME_TIME to the current time (Unix nanoseconds).
//   - With no such pod, on a one-card node it gives the card without
//     patching anything; otherwise it answers, without a gRPC error, with
//     NVIDIA_VISIBLE_DEVICES=no-gpu-has-<n>GiB-to-run (buildErrResponse), a
//     value no container runtime accepts.
//
// Stop stops serving and removes the socket, as the plugin does on
// SIGTERM, so kubelet sees the plugin go.
package aliyunplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

// SocketName is the plugin's socket in kubelet's device-plugins directory.
const SocketName = "aliyungpushare.sock"

// Config configures a Plugin.
type Config struct {
	// Dir is kubelet's device-plugins directory (holding kubelet.sock).
	Dir string
	// Node is the node the plugin runs on.
	Node string
	// Cards in NVML index order; Aliyun's plugin numbers them by
	// /dev/nvidiaN minor, taken here to equal the index.
	Cards []gpu.Device
	// Client reads and patches pods.
	Client kubernetes.Interface
}

// Plugin is a running fake of Aliyun's device plugin.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	cfg Config
	// units is the first card's memory in GiB: every card's device count.
	units int64
	srv   *grpc.Server
	stop  chan struct{}

	// mu serialises Allocate, as the plugin's own lock does.
	mu sync.Mutex
}

// Start serves the plugin and registers it with kubelet.
func Start(ctx context.Context, cfg Config) (*Plugin, error) {
	if len(cfg.Cards) == 0 {
		return nil, errors.New("no cards")
	}
	p := &Plugin{cfg: cfg, units: cfg.Cards[0].MemoryMiB / 1024, stop: make(chan struct{})}
	sock := filepath.Join(cfg.Dir, SocketName)
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", sock, err)
	}
	p.srv = grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go func() { _ = p.srv.Serve(ln) }()
	conn, err := grpc.NewClient("unix://"+filepath.Join(cfg.Dir, "kubelet.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		p.Stop()
		return nil, fmt.Errorf("dialing kubelet: %w", err)
	}
	defer func() { _ = conn.Close() }()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: SocketName, ResourceName: string(gpushare.ResourceGPUMem),
	}); err != nil {
		p.Stop()
		return nil, fmt.Errorf("registering with kubelet: %w", err)
	}
	return p, nil
}

// Stop stops serving and removes the socket.
func (p *Plugin) Stop() {
	select {
	case <-p.stop:
		return
	default:
	}
	close(p.stop)
	p.srv.Stop()
	_ = os.Remove(filepath.Join(p.cfg.Dir, SocketName))
}

// DeviceID is the plugin's ID of unit n of the card with this UUID.
func DeviceID(uuid string, n int64) string { return fmt.Sprintf("%s-_-%d", uuid, n) }

// GetDevicePluginOptions offers neither preferred allocations nor
// PreStartContainer.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

// ListAndWatch sends every card's devices once, then waits.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	var devs []*pluginapi.Device
	for _, c := range p.cfg.Cards {
		for n := int64(0); n < p.units; n++ {
			devs = append(devs, &pluginapi.Device{ID: DeviceID(c.UUID, n), Health: pluginapi.Healthy})
		}
	}
	if err := s.Send(&pluginapi.ListAndWatchResponse{Devices: devs}); err != nil {
		return err
	}
	select {
	case <-p.stop:
	case <-s.Context().Done():
	}
	return nil
}

// Allocate finds the pod as Aliyun's plugin does and runs every container
// of the request on the card its ALIYUN_COM_GPU_MEM_IDX names.
func (p *Plugin) Allocate(ctx context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var units int64
	for _, cr := range req.ContainerRequests {
		units += int64(len(cr.DevicesIds))
	}
	pod, err := p.candidate(ctx, units)
	if err != nil {
		return p.failed(req, units), nil
	}
	if pod == nil {
		if len(p.cfg.Cards) == 1 {
			return p.response(req, units, p.cfg.Cards[0].UUID, 0), nil
		}
		return p.failed(req, units), nil
	}
	idx, err := strconv.Atoi(pod.Annotations[gpushare.AnnotationIndex])
	if err != nil || idx < 0 || idx >= len(p.cfg.Cards) {
		return p.failed(req, units), nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		gpushare.AnnotationAssigned:   "true",
		gpushare.AnnotationAssumeTime: strconv.FormatInt(time.Now().UnixNano(), 10),
	}}})
	if err != nil {
		return nil, err
	}
	if _, err := p.cfg.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{}); err != nil {
		return p.failed(req, units), nil
	}
	return p.response(req, units, strconv.Itoa(idx), idx), nil
}

// candidate returns the oldest assumed pod of the node asking units, or nil.
func (p *Plugin) candidate(ctx context.Context, units int64) (*corev1.Pod, error) {
	list, err := p.cfg.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var cands []*corev1.Pod
	for i := range list.Items {
		pod := &list.Items[i]
		_, hasTime := pod.Annotations[gpushare.AnnotationAssumeTime]
		if pod.Spec.NodeName == p.cfg.Node && pod.Status.Phase == corev1.PodPending && appUnits(pod) > 0 &&
			hasTime && pod.Annotations[gpushare.AnnotationAssigned] == "false" {
			cands = append(cands, pod)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return assumeTime(cands[i]) <= assumeTime(cands[j]) })
	for _, pod := range cands {
		if appUnits(pod) == units {
			return pod, nil
		}
	}
	return nil, nil
}

func (p *Plugin) response(req *pluginapi.AllocateRequest, units int64, visible string, idx int) *pluginapi.AllocateResponse {
	resp := &pluginapi.AllocateResponse{}
	for _, cr := range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{Envs: map[string]string{
			"NVIDIA_VISIBLE_DEVICES":       visible,
			gpushare.AnnotationIndex:       strconv.Itoa(idx),
			gpushare.AnnotationPodMem:      strconv.FormatInt(units, 10),
			"ALIYUN_COM_GPU_MEM_CONTAINER": strconv.Itoa(len(cr.DevicesIds)),
			gpushare.AnnotationDevMem:      strconv.FormatInt(p.units, 10),
		}})
	}
	return resp
}

func (p *Plugin) failed(req *pluginapi.AllocateRequest, units int64) *pluginapi.AllocateResponse {
	r := p.response(req, units, fmt.Sprintf("no-gpu-has-%dGiB-to-run", units), -1)
	for _, c := range r.ContainerResponses {
		c.Envs[gpushare.AnnotationIndex] = "-1"
	}
	return r
}

// appUnits is the pod's aliyun.com/gpu-mem limits over its app containers.
func appUnits(pod *corev1.Pod) int64 {
	var n int64
	for _, c := range pod.Spec.Containers {
		if q, ok := c.Resources.Limits[gpushare.ResourceGPUMem]; ok {
			n += q.Value()
		}
	}
	return n
}

func assumeTime(pod *corev1.Pod) uint64 {
	t, _ := strconv.ParseUint(pod.Annotations[gpushare.AnnotationAssumeTime], 10, 64)
	return t
}
