package devicehost

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	_ "unsafe" // for go:linkname

	cadvisorapi "github.com/google/cadvisor/info/v1"
	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/kubernetes/pkg/kubelet/apis/podresources"
	"k8s.io/kubernetes/pkg/kubelet/cm/containermap"
	"k8s.io/kubernetes/pkg/kubelet/cm/devicemanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
)

// newManagerImpl is kubelet's own constructor of the device manager, which
// unlike the exported NewManagerImpl takes the registration socket's path
// (and so the plugin directory) as an argument. Its signature is internal
// to k8s.io/kubernetes v1.34.3; go.mod pins that version.
//
//go:linkname newManagerImpl k8s.io/kubernetes/pkg/kubelet/cm/devicemanager.newManagerImpl
func newManagerImpl(socketPath string, topology []cadvisorapi.Node, topologyAffinityStore topologymanager.Store) (*devicemanager.ManagerImpl, error)

// Options configure a Host.
type Options struct {
	// PodResourcesSocket, when set, is where the host serves kubelet's
	// PodResources v1 API (kubelet: /var/lib/kubelet/pod-resources/kubelet.sock).
	PodResourcesSocket string
	// ListAfterAdmit makes a pod visible to PodResources List only once it
	// is admitted. kubelet itself (HandlePodAdditions) adds a pod to its
	// pod manager, and so to List, before admitting it; this option takes
	// that away from a plugin, to exercise its fallback paths.
	ListAfterAdmit bool
}

// Host is kubelet's device manager on a plugin directory of its own, with
// the bits of kubelet around it that a device plugin can observe: pod
// admission in kubelet's order, container start, restart, PodResources.
type Host struct {
	dir  string // plugin directory: kubelet.sock, plugin sockets, checkpoint
	opts Options

	// admitMu serialises admissions and restarts, as kubelet's sync loop
	// does: the device manager is not safe for concurrent admissions.
	admitMu sync.Mutex
	// m is the current device manager; replaced by Restart.
	m atomic.Pointer[devicemanager.ManagerImpl]

	// mu guards the fields below. It is never held across a call into the
	// device manager: the plugin calls PodResources during an allocation.
	mu sync.Mutex
	// pods: UID -> pod, the pods kubelet's pod manager holds (active pods).
	pods map[types.UID]*corev1.Pod
	// listed: UIDs visible to PodResources List (all of pods unless
	// Options.ListAfterAdmit hides one under admission).
	listed sets.Set[types.UID]
	// containerIDs: "podUID/container" -> a fake runtime container ID, for
	// the running-container map handed to a restarted manager.
	containerIDs map[string]string

	pr *grpc.Server // PodResources server; nil without Options.PodResourcesSocket
}

// Result is what one container got at admission.
type Result struct {
	// Env is the container's environment from the device plugins.
	Env map[string]string
	// Annotations are the container annotations from the device plugins.
	Annotations map[string]string
	// Mounts are the mounts the device plugins asked for, in the order
	// kubelet hands them to the runtime.
	Mounts []Mount
	// CDIDevices are the fully qualified CDI device names kubelet passes
	// to the runtime (CRI ContainerConfig.CDIDevices).
	CDIDevices []string
	// Devices: resource name -> device IDs.
	Devices map[string][]string
}

// Mount is a bind mount a device plugin asked kubelet for.
type Mount struct {
	ContainerPath, HostPath string
	ReadOnly                bool
}

// Start creates kubelet's device manager with its registration socket at
// pluginDir/kubelet.sock and starts it, as kubelet does at boot.
func Start(ctx context.Context, pluginDir string, opts Options) (*Host, error) {
	h := &Host{dir: pluginDir, opts: opts, pods: map[types.UID]*corev1.Pod{}, listed: sets.New[types.UID](), containerIDs: map[string]string{}}
	if err := h.startManager(); err != nil {
		return nil, err
	}
	if opts.PodResourcesSocket != "" {
		if err := h.servePodResources(ctx); err != nil {
			_ = h.m.Load().Stop()
			return nil, err
		}
	}
	return h, nil
}

func (h *Host) startManager() error {
	m, err := newManagerImpl(filepath.Join(h.dir, "kubelet.sock"), nil, topologymanager.NewFakeManager())
	if err != nil {
		return fmt.Errorf("creating device manager: %w", err)
	}
	running := containermap.NewContainerMap()
	runningSet := sets.New[string]()
	h.mu.Lock()
	for key, id := range h.containerIDs {
		uid, name := splitKey(key)
		running.Add(uid, name, id)
		runningSet.Insert(id)
	}
	h.mu.Unlock()
	if err := m.Start(h.activePods, readySources{}, running, runningSet); err != nil {
		return fmt.Errorf("starting device manager: %w", err)
	}
	h.m.Store(m)
	return nil
}

// Stop stops the device manager and the PodResources server.
func (h *Host) Stop() {
	h.admitMu.Lock()
	defer h.admitMu.Unlock()
	if h.pr != nil {
		h.pr.Stop()
	}
	_ = h.m.Load().Stop()
}

// Restart stops the device manager and starts a new one on the same
// directory, as a kubelet restart does: the new manager reads the
// checkpoint, wipes the plugin sockets and re-creates kubelet.sock, and the
// plugins must register again. Pods admitted before keep their devices.
func (h *Host) Restart() error {
	h.admitMu.Lock()
	defer h.admitMu.Unlock()
	if err := h.m.Load().Stop(); err != nil {
		return fmt.Errorf("stopping device manager: %w", err)
	}
	return h.startManager()
}

// WaitForResource waits until resource has at least n allocatable (healthy)
// devices registered.
func (h *Host) WaitForResource(ctx context.Context, resource string, n int64) error {
	for {
		_, alloc := h.Capacity(resource)
		if alloc >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d allocatable %s (have %d): %w", n, resource, alloc, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Capacity returns the capacity and allocatable count of resource, as the
// node status would report them.
func (h *Host) Capacity(resource string) (capacity, allocatable int64) {
	c, a, _ := h.m.Load().GetCapacity()
	if q, ok := c[corev1.ResourceName(resource)]; ok {
		capacity = q.Value()
	}
	if q, ok := a[corev1.ResourceName(resource)]; ok {
		allocatable = q.Value()
	}
	return capacity, allocatable
}

// Admit admits pod the way kubelet does: it adds the pod to the active
// pods, asks the device manager to allocate for every container (init
// containers first, each list in spec order), then fetches each container's
// run options as the runtime manager does before starting it. On an error
// the pod is rejected (dropped from the active pods) and the error is the
// one kubelet would report. It returns container name -> Result.
func (h *Host) Admit(pod *corev1.Pod) (map[string]Result, error) {
	h.admitMu.Lock()
	defer h.admitMu.Unlock()
	m := h.m.Load()
	h.mu.Lock()
	h.pods[pod.UID] = pod
	if !h.opts.ListAfterAdmit {
		h.listed.Insert(pod.UID)
	}
	h.mu.Unlock()
	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	for i := range all {
		if err := m.Allocate(pod, &all[i]); err != nil {
			h.Remove(pod.UID)
			return nil, fmt.Errorf("admitting pod %s/%s, container %s: %w", pod.Namespace, pod.Name, all[i].Name, err)
		}
	}
	h.mu.Lock()
	h.listed.Insert(pod.UID)
	h.mu.Unlock()
	out := map[string]Result{}
	for i := range all {
		c := &all[i]
		opts, err := m.GetDeviceRunContainerOptions(pod, c)
		if err != nil {
			return nil, fmt.Errorf("run options of pod %s/%s, container %s: %w", pod.Namespace, pod.Name, c.Name, err)
		}
		r := Result{Env: map[string]string{}, Annotations: map[string]string{}, Devices: map[string][]string{}}
		if opts == nil { // a container without device plugin resources
			out[c.Name] = r
			continue
		}
		for _, e := range opts.Envs {
			r.Env[e.Name] = e.Value
		}
		for _, a := range opts.Annotations {
			r.Annotations[a.Name] = a.Value
		}
		for _, mt := range opts.Mounts {
			r.Mounts = append(r.Mounts, Mount{ContainerPath: mt.ContainerPath, HostPath: mt.HostPath, ReadOnly: mt.ReadOnly})
		}
		for _, d := range opts.CDIDevices {
			r.CDIDevices = append(r.CDIDevices, d.Name)
		}
		for res, devs := range m.GetDevices(string(pod.UID), c.Name) {
			for id := range devs {
				r.Devices[res] = append(r.Devices[res], id)
			}
			sort.Strings(r.Devices[res])
		}
		out[c.Name] = r
		h.mu.Lock()
		h.containerIDs[string(pod.UID)+"/"+c.Name] = fmt.Sprintf("cid-%s-%s", pod.UID, c.Name)
		h.mu.Unlock()
	}
	return out, nil
}

// Remove deletes pod from the active pods; the device manager frees its
// devices at its next allocation.
func (h *Host) Remove(uid types.UID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.pods, uid)
	h.listed.Delete(uid)
	for k := range h.containerIDs {
		if u, _ := splitKey(k); u == string(uid) {
			delete(h.containerIDs, k)
		}
	}
}

// AllocatableDevices returns the healthy device IDs of resource the
// registered plugin advertises (those kubelet may allocate or has
// allocated), sorted.
func (h *Host) AllocatableDevices(resource string) []string {
	var ids []string
	for id := range h.m.Load().GetAllocatableDevices()[resource] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Devices returns the device IDs of resource the device manager holds for
// a container, sorted.
func (h *Host) Devices(uid types.UID, container, resource string) []string {
	var ids []string
	for id := range h.m.Load().GetDevices(string(uid), container)[resource] {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// activePods is the device manager's view of kubelet's active pods.
func (h *Host) activePods() []*corev1.Pod {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(h.pods))
	for _, p := range h.pods {
		out = append(out, p)
	}
	return out
}

func splitKey(k string) (uid, name string) {
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			return k[:i], k[i+1:]
		}
	}
	return k, ""
}

type readySources struct{}

func (readySources) AddSource(string) {}
func (readySources) AllReady() bool   { return true }

// servePodResources serves kubelet's own PodResources v1 server, fed by
// this host's pods and device manager.
func (h *Host) servePodResources(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Dir(h.opts.PodResourcesSocket), 0o750); err != nil {
		return fmt.Errorf("creating the pod-resources directory: %w", err)
	}
	_ = os.Remove(h.opts.PodResourcesSocket)
	ln, err := net.Listen("unix", h.opts.PodResourcesSocket)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", h.opts.PodResourcesSocket, err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, podresources.NewV1PodResourcesServer(ctx, podresources.PodResourcesProviders{
		Pods: podsProvider{h}, Devices: devicesProvider{h}, Cpus: noCPUs{}, Memory: noMemory{}, DynamicResources: noDRA{},
	}))
	h.pr = srv
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			klog.FromContext(ctx).Error(err, "PodResources server stopped")
		}
	}()
	return nil
}

// podsProvider and devicesProvider adapt the host to kubelet's PodResources
// server, as kubelet's pod manager and container manager do. The server
// calls them while an admission may be in flight (the plugin asks it from
// inside GetPreferredAllocation), so they take only the short lock.
type podsProvider struct{ h *Host }

func (p podsProvider) snapshot() []*corev1.Pod {
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	var out []*corev1.Pod
	for uid, pod := range p.h.pods {
		if p.h.listed.Has(uid) {
			out = append(out, pod)
		}
	}
	return out
}

func (p podsProvider) GetActivePods() []*corev1.Pod { return p.snapshot() }
func (p podsProvider) GetPods() []*corev1.Pod       { return p.snapshot() }
func (p podsProvider) GetPodByName(namespace, name string) (*corev1.Pod, bool) {
	for _, pod := range p.snapshot() {
		if pod.Namespace == namespace && pod.Name == name {
			return pod, true
		}
	}
	return nil, false
}

type devicesProvider struct{ h *Host }

func (d devicesProvider) manager() *devicemanager.ManagerImpl { return d.h.m.Load() }

func (d devicesProvider) UpdateAllocatedDevices() { d.manager().UpdateAllocatedDevices() }

func (d devicesProvider) GetDevices(podUID, containerName string) []*podresourcesv1.ContainerDevices {
	return toContainerDevices(d.manager().GetDevices(podUID, containerName))
}

func (d devicesProvider) GetAllocatableDevices() []*podresourcesv1.ContainerDevices {
	return toContainerDevices(d.manager().GetAllocatableDevices())
}

// toContainerDevices is kubelet's containerDevicesFromResourceDeviceInstances
// (pkg/kubelet/cm), without topology: our plugin reports none.
func toContainerDevices(devs devicemanager.ResourceDeviceInstances) []*podresourcesv1.ContainerDevices {
	var out []*podresourcesv1.ContainerDevices
	for res, m := range devs {
		for id := range m {
			out = append(out, &podresourcesv1.ContainerDevices{ResourceName: res, DeviceIds: []string{id}})
		}
	}
	return out
}

type noCPUs struct{}

func (noCPUs) GetCPUs(string, string) []int64 { return nil }
func (noCPUs) GetAllocatableCPUs() []int64    { return nil }

type noMemory struct{}

func (noMemory) GetMemory(string, string) []*podresourcesv1.ContainerMemory { return nil }
func (noMemory) GetAllocatableMemory() []*podresourcesv1.ContainerMemory    { return nil }

type noDRA struct{}

func (noDRA) GetDynamicResources(*corev1.Pod, *corev1.Container) []*podresourcesv1.DynamicResource {
	return nil
}
