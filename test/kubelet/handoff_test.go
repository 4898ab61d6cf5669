package kubelet_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/kubelet/devicehost"
	"github.com/gpushare/gpushare/test/util"
)

const (
	nodeName = "gpu-a"
	resource = string(gpushare.ResourceGPUMem)
)

// env is a running kubelet device manager with our plugin registered.
type env struct {
	t       *testing.T
	ctx     context.Context
	dir     string // kubelet's root directory
	setup   setup
	host    *devicehost.Host
	client  *fake.Clientset
	gpus    *gpu.Fake
	cards   []gpu.Device
	handoff *handoff.Handoff
	// podWatch stands between the plugin's pod informer and the API; nil
	// unless setup.holdablePodWatch.
	podWatch *podWatch
}

type setup struct {
	fakeGPUs       string
	listAfterAdmit bool
	recovery       time.Duration
	// strategy is --device-list-strategy; envvar when empty.
	strategy string
	// holdablePodWatch: the plugin's pod informer watches through
	// env.podWatch, which a test may hold.
	holdablePodWatch bool
}

func start(t *testing.T, s setup) *env {
	t.Helper()
	e := newEnv(t, s)
	p := e.runPlugin(gpushare.UnitGiB)
	select {
	case e.handoff = <-p.ready:
	case err := <-p.done:
		t.Fatalf("Run ended before serving: %v", err)
	}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	if err := e.host.WaitForResource(e.deadline(10*time.Second), resource, e.totalUnits()); err != nil {
		t.Fatal(err)
	}
	return e
}

// newEnv starts kubelet's device manager and its PodResources server on a
// directory of its own, with a fake API holding the node and fake cards.
func newEnv(t *testing.T, s setup) *env {
	t.Helper()
	ctx, dir, host := startDeviceManager(t, s.listAfterAdmit)
	devs, err := gpu.ParseFakeGPUs(s.fakeGPUs, nodeName)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, dir: dir, setup: s, host: host, client: fake.NewClientset(util.MakeNode(nodeName).Obj()), gpus: gpu.NewFake(devs), cards: devs}
	if s.holdablePodWatch {
		e.podWatch = newPodWatch(t, e.client)
	}
	return e
}

// startDeviceManager starts kubelet's device manager and its
// PodResources server on a directory of its own (managerDir), until the
// test ends; ctx ends with the test too.
func startDeviceManager(t *testing.T, listAfterAdmit bool) (ctx context.Context, dir string, host *devicehost.Host) {
	t.Helper()
	_, ctx = ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	dir = managerDir(t)
	host, err := devicehost.Start(ctx, filepath.Join(dir, "device-plugins"), devicehost.Options{
		PodResourcesSocket: filepath.Join(dir, "pod-resources", "kubelet.sock"),
		ListAfterAdmit:     listAfterAdmit,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Stop)
	return ctx, dir, host
}

// managerDir is t.TempDir for a directory kubelet's device manager writes
// in. Once, on a loaded machine, TestHealthAndRecovery failed only in
// t.TempDir's cleanup ("directory not empty"): a file appeared in the
// directory after the manager and the plugin had stopped, most likely the
// manager's checkpoint for the plugin's last ListAndWatch update (not
// proven: the failure did not recur). This one retries the removal for up
// to 2 s.
func managerDir(t *testing.T) string {
	t.Helper()
	name := strings.ReplaceAll(t.Name(), "/", "_")
	name = name[:min(len(name), 40)] // unix socket paths stay short
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var err error
		for range 100 {
			if err = os.RemoveAll(dir); err == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("removing %s: %v", dir, err)
	})
	return dir
}

// plugin is one run of the device plugin.
type plugin struct {
	// ready delivers the handoff once the plugin serves.
	ready chan *handoff.Handoff
	// done delivers what Run returned.
	done chan error
	// stop ends the run and returns what Run returned.
	stop func() error
}

// runPlugin starts the device plugin in unit on e's kubelet.
func (e *env) runPlugin(unit string) *plugin {
	strategy := e.setup.strategy
	if strategy == "" {
		strategy = deviceplugin.StrategyEnvvar
	}
	ctx, cancel := context.WithCancel(e.ctx)
	p := &plugin{ready: make(chan *handoff.Handoff, 1), done: make(chan error, 1)}
	go func() {
		p.done <- runDevicePlugin(ctx, deviceplugin.Config{
			NodeName: nodeName, Unit: unit, DeviceListStrategy: strategy,
			HealthCheck: true, RecoveryWindow: e.setup.recovery, KubeletDir: e.dir, VerifyPeriod: 200 * time.Millisecond,
			Client: e.client, GPUs: e.gpus, OnReady: func(h *handoff.Handoff) { p.ready <- h },
		})
	}()
	var once sync.Once
	var err error
	p.stop = func() error {
		once.Do(func() {
			cancel()
			err = <-p.done
		})
		return err
	}
	return p
}

// servePlugin runs the device plugin in unit on e's kubelet until the test
// ends, and returns once it serves (e.handoff set), failing the test if it
// ends first.
func (e *env) servePlugin(unit string) *plugin {
	e.t.Helper()
	p := e.runPlugin(unit)
	select {
	case e.handoff = <-p.ready:
	case err := <-p.done:
		e.t.Fatalf("Run ended before serving: %v", err)
	}
	e.t.Cleanup(func() { _ = p.stop() })
	return p
}

func (e *env) deadline(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(e.ctx, d)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) totalUnits() int64 {
	var n int64
	for _, d := range e.cards {
		n += d.MemoryMiB / 1024
	}
	return n
}

func (e *env) card(index int) gpu.Device { return e.cards[index] }

// bind does what the extender's bind does: it writes the allocation
// (container name -> card indexes), the Aliyun annotations and the pod's
// node, and creates the pod. at is the bind time.
func (e *env) bind(w *util.PodWrapper, cards map[string][]int, at time.Time) *corev1.Pod {
	e.t.Helper()
	pod := e.bound(w, cards, at)
	created, err := e.client.CoreV1().Pods(pod.Namespace).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return created
}

// bound is the pod bind creates.
func (e *env) bound(w *util.PodWrapper, cards map[string][]int, at time.Time) *corev1.Pod {
	e.t.Helper()
	demand, err := gpushare.PodDemand(w.Obj())
	if err != nil {
		e.t.Fatal(err)
	}
	a := &gpushare.Allocation{Node: nodeName, Unit: gpushare.UnitGiB}
	for _, d := range demand {
		ca := gpushare.ContainerAllocation{Name: d.Name, Init: d.Init}
		for _, idx := range cards[d.Name] {
			ca.Devices = append(ca.Devices, gpushare.DeviceShare{Index: idx, UUID: e.card(idx).UUID, Units: d.Units})
		}
		a.Containers = append(a.Containers, ca)
	}
	first := a.Containers[0].Devices[0].Index
	pod := w.Node(nodeName).Allocation(a).
		Annotation(gpushare.AnnotationIndex, strconv.Itoa(first)).
		Annotation(gpushare.AnnotationPodMem, strconv.FormatInt(a.Total(), 10)).
		Annotation(gpushare.AnnotationDevMem, strconv.FormatInt(e.card(first).MemoryMiB/1024, 10)).
		Annotation(gpushare.AnnotationAssigned, "false").
		Annotation(gpushare.AnnotationAssumeTime, strconv.FormatInt(at.UnixNano(), 10)).Obj()
	return pod
}

// admission is what kubelet gave one pod.
type admission struct {
	pod     *corev1.Pod
	results map[string]devicehost.Result
}

// settle waits until the plugin has verified every admitted pod against
// PodResources and written its annotations: every pod ASSIGNED=true and
// the annotations stable for a few verify periods.
func (e *env) settle(pods []*corev1.Pod) map[string]*corev1.Pod {
	e.t.Helper()
	ctx := e.deadline(30 * time.Second)
	var last string
	stable := 0
	for {
		out := map[string]*corev1.Pod{}
		var sig strings.Builder
		all := true
		for _, p := range pods {
			got, err := e.client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				e.t.Fatal(err)
			}
			out[p.Name] = got
			all = all && got.Annotations[gpushare.AnnotationAssigned] == "true"
			sig.WriteString(got.Annotations[gpushare.AnnotationAllocation])
		}
		if all && sig.String() == last {
			stable++
			if stable >= 3 {
				return out
			}
		} else {
			stable = 0
		}
		last = sig.String()
		select {
		case <-ctx.Done():
			e.t.Fatalf("annotations did not settle: %v", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// check compares every admitted container's environment and kubelet's
// device IDs with its pod's final allocation annotation, and checks that
// no card holds more units than it has. It returns the mismatches.
func (e *env) check(adms []admission, final map[string]*corev1.Pod) []string {
	e.t.Helper()
	var bad []string
	used := map[string]int64{} // UUID -> units held, by kubelet's IDs
	seen := map[string]string{}
	byUUID := map[string]gpu.Device{}
	for _, d := range e.cards {
		byUUID[d.UUID] = d
	}
	for _, adm := range adms {
		p := final[adm.pod.Name]
		a, err := gpushare.ParseAllocation(p.Annotations[gpushare.AnnotationAllocation])
		if err != nil {
			e.t.Fatal(err)
		}
		for _, c := range a.Containers {
			r, ok := adm.results[c.Name]
			if !ok {
				bad = append(bad, fmt.Sprintf("%s/%s: not admitted", p.Name, c.Name))
				continue
			}
			var uuids, idx []string
			for _, d := range c.Devices {
				uuids = append(uuids, d.UUID)
				idx = append(idx, strconv.Itoa(d.Index))
			}
			if got := r.Env[deviceplugin.EnvVisibleDevices]; got != strings.Join(uuids, ",") {
				bad = append(bad, fmt.Sprintf("%s/%s: env %s=%s, annotation says %v", p.Name, c.Name, deviceplugin.EnvVisibleDevices, got, uuids))
			}
			if got := r.Env[gpushare.AnnotationIndex]; got != strings.Join(idx, ",") {
				bad = append(bad, fmt.Sprintf("%s/%s: env %s=%s, annotation says %v", p.Name, c.Name, gpushare.AnnotationIndex, got, idx))
			}
			// kubelet's own record of the container's devices.
			perCard := map[string]int64{}
			for _, id := range r.Devices[resource] {
				uuid, _, err := handoff.ParseDeviceID(id)
				if err != nil {
					e.t.Fatal(err)
				}
				perCard[uuid]++
				if !c.Init { // kubelet hands an init container's IDs on to the app containers
					if o, dup := seen[id]; dup {
						bad = append(bad, fmt.Sprintf("device %s held by %s and %s/%s", id, o, p.Name, c.Name))
					}
					seen[id] = p.Name + "/" + c.Name
					used[uuid]++
				}
			}
			want := map[string]int64{}
			for _, d := range c.Devices {
				want[d.UUID] = d.Units
			}
			if diff := cmp.Diff(want, perCard); diff != "" {
				bad = append(bad, fmt.Sprintf("%s/%s: kubelet's devices differ from the annotation (-annotation +kubelet):\n%s", p.Name, c.Name, diff))
			}
		}
	}
	for uuid, u := range used {
		if limit := byUUID[uuid].MemoryMiB / 1024; u > limit {
			bad = append(bad, fmt.Sprintf("card %d holds %d units by kubelet's devices, has %d", byUUID[uuid].Index, u, limit))
		}
	}
	// The same from the final annotations, as the extender will count it.
	perCard := map[int]int64{}
	for _, adm := range adms {
		a, _ := gpushare.ParseAllocation(final[adm.pod.Name].Annotations[gpushare.AnnotationAllocation])
		for idx, u := range a.PerCard() {
			perCard[idx] += u
		}
	}
	for idx, u := range perCard {
		if limit := e.card(idx).MemoryMiB / 1024; u > limit {
			bad = append(bad, fmt.Sprintf("card %d holds %d units by the annotations, has %d", idx, u, limit))
		}
	}
	return bad
}

func TestRegistrationAndInventory(t *testing.T) {
	e := start(t, setup{fakeGPUs: "2xTesla-T4:16GiB,1xA100-SXM4:80GiB"})
	capacity, alloc := e.host.Capacity(resource)
	if capacity != 112 || alloc != 112 {
		t.Errorf("kubelet reports %s capacity %d, allocatable %d; want 112 and 112 (16+16+80, heterogeneous cards exact)", resource, capacity, alloc)
	}
	node := e.waitNode(func(n *corev1.Node) bool { return n.Annotations[gpushare.AnnotationInventory] != "" })
	inv, err := gpushare.ParseInventory(node.Annotations[gpushare.AnnotationInventory])
	if err != nil {
		t.Fatal(err)
	}
	want := &gpushare.Inventory{Unit: gpushare.UnitGiB, Devices: []gpushare.Device{
		{Index: 0, UUID: e.card(0).UUID, Model: "Tesla-T4", Memory: 16, Healthy: true, Isolation: gpushare.IsolationNone},
		{Index: 1, UUID: e.card(1).UUID, Model: "Tesla-T4", Memory: 16, Healthy: true, Isolation: gpushare.IsolationNone},
		{Index: 2, UUID: e.card(2).UUID, Model: "A100-SXM4", Memory: 80, Healthy: true, Isolation: gpushare.IsolationNone},
	}}
	if diff := cmp.Diff(want, inv); diff != "" {
		t.Errorf("inventory mismatch (-want +got):\n%s", diff)
	}
	// No card count in the node's capacity: kubelet would count pods'
	// gpu-count against it (Publisher).
	if q, ok := node.Status.Capacity[gpushare.ResourceGPUCount]; ok {
		t.Errorf("%s capacity = %s, want none", gpushare.ResourceGPUCount, q.String())
	}
}

func (e *env) waitNode(ok func(*corev1.Node) bool) *corev1.Node {
	e.t.Helper()
	ctx := e.deadline(10 * time.Second)
	for {
		n, err := e.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err == nil && ok(n) {
			return n
		}
		select {
		case <-ctx.Done():
			e.t.Fatalf("node never got there: %v", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// burst binds n pods asking units each, spread over the cards, all in the
// same second, then admits them in a shuffled order.
func burst(t *testing.T, s setup, n int, units int64) {
	e := start(t, s)
	bindAt := time.Now()
	var pods []*corev1.Pod
	free := map[int]int64{}
	for _, d := range e.cards {
		free[d.Index] = d.MemoryMiB / 1024
	}
	for i := 0; i < n; i++ {
		card := i % len(e.cards)
		for free[card] < units {
			card = (card + 1) % len(e.cards)
		}
		free[card] -= units
		p := util.MakePod(fmt.Sprintf("burst-%03d", i)).GPUMem(units)
		pods = append(pods, e.bind(p, map[string][]int{"c0": {card}}, bindAt.Add(time.Duration(i)*time.Millisecond)))
	}
	if s.listAfterAdmit {
		// Without kubelet listing the pod under admission, matching relies
		// on the informer alone: let it catch up, as it would in a cluster.
		e.waitWaiting(n)
	}
	order := rand.New(rand.NewSource(42)).Perm(n)
	startAdmit := time.Now()
	var adms []admission
	for _, i := range order {
		res, err := e.host.Admit(pods[i])
		if err != nil {
			t.Fatalf("admitting %s: %v", pods[i].Name, err)
		}
		adms = append(adms, admission{pod: pods[i], results: res})
	}
	admitted := time.Since(startAdmit)
	final := e.settle(pods)
	settled := time.Since(startAdmit)
	bad := e.check(adms, final)
	st := e.handoff.Stats()
	t.Logf("burst: %d pods of %d GiB bound within 1 s on %d cards, admitted in shuffled order in %.2f s, annotations settled after %.2f s; mismatches: %d; "+
		"allocations %d (steered %d, reused %d), relocated %d, corrected after the fact %d",
		n, units, len(e.cards), admitted.Seconds(), settled.Seconds(), len(bad), st.Allocations, st.Steered, st.Reused, st.Relocated, st.Corrected)
	for _, b := range bad {
		t.Error(b)
	}
}

func (e *env) waitWaiting(n int) {
	ctx := e.deadline(10 * time.Second)
	for e.handoff.Waiting() < n {
		select {
		case <-ctx.Done():
			e.t.Fatalf("the plugin sees %d waiting pods, want %d", e.handoff.Waiting(), n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestBurst: many pods with identical requests on one node, bound in the
// same second, admitted in an order unrelated to bind order. Without
// kubelet's hint (kubelet listing the pod under admission in PodResources)
// the plugin must guess among pods with the same request, and PodResources
// after the fact must repair every wrong guess in the annotations.
func TestBurst(t *testing.T) {
	tests := []struct {
		name  string
		setup setup
		pods  int
		units int64
	}{
		{name: "200 pods", setup: setup{fakeGPUs: "8xA100-SXM4:80GiB"}, pods: 200, units: 3},
		{name: "200 pods without kubelet's hint", setup: setup{fakeGPUs: "8xA100-SXM4:80GiB", listAfterAdmit: true}, pods: 200, units: 3},
		{name: "node filled exactly", setup: setup{fakeGPUs: "8xTesla-T4:16GiB"}, pods: 32, units: 4},
		{name: "node filled exactly without kubelet's hint", setup: setup{fakeGPUs: "8xTesla-T4:16GiB", listAfterAdmit: true}, pods: 32, units: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { burst(t, tc.setup, tc.pods, tc.units) })
	}
}

func TestMultiContainerPods(t *testing.T) {
	e := start(t, setup{fakeGPUs: "2xTesla-T4:16GiB,1xA100-SXM4:80GiB"})
	at := time.Now()
	restartable := corev1.ContainerRestartPolicyAlways
	sidecarPod := util.MakePod("sidecar").GPUMem(4)
	sidecarPod.InitGPUMem(2)
	sidecarPod.Spec.InitContainers[0].RestartPolicy = &restartable
	tests := []struct {
		name  string
		pod   *util.PodWrapper
		cards map[string][]int
		// want: container -> card indexes after the handoff (the annotation
		// is repaired where kubelet's reuse of init devices decides).
		want map[string][]int
	}{
		{name: "two app containers on two cards", pod: util.MakePod("two").GPUMem(4).GPUMem(6),
			cards: map[string][]int{"c0": {0}, "c1": {2}}, want: map[string][]int{"c0": {0}, "c1": {2}}},
		{name: "app container on two cards", pod: util.MakePod("wide").GPUMemCards(8, 2),
			cards: map[string][]int{"c0": {0, 1}}, want: map[string][]int{"c0": {0, 1}}},
		{name: "init container on the app's card", pod: util.MakePod("init-same").InitGPUMem(8).GPUMem(4),
			cards: map[string][]int{"i0": {2}, "c0": {2}}, want: map[string][]int{"i0": {2}, "c0": {2}}},
		{name: "kubelet reuses init devices for an app container annotated elsewhere", pod: util.MakePod("init-reuse").InitGPUMem(4).GPUMem(4),
			cards: map[string][]int{"i0": {1}, "c0": {0}}, want: map[string][]int{"i0": {1}, "c0": {1}}},
		{name: "restartable init container keeps its own devices", pod: sidecarPod,
			cards: map[string][]int{"i0": {1}, "c0": {1}}, want: map[string][]int{"i0": {1}, "c0": {1}}},
		{name: "non-GPU container beside GPU ones", pod: util.MakePod("mixed").Container("log").GPUMem(2),
			cards: map[string][]int{"c1": {2}}, want: map[string][]int{"c1": {2}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := e.bind(tc.pod, tc.cards, at)
			res, err := e.host.Admit(pod)
			if err != nil {
				t.Fatal(err)
			}
			final := e.settle([]*corev1.Pod{pod})
			for _, b := range e.check([]admission{{pod: pod, results: res}}, final) {
				t.Error(b)
			}
			a, _ := gpushare.ParseAllocation(final[pod.Name].Annotations[gpushare.AnnotationAllocation])
			got := map[string][]int{}
			for _, c := range a.Containers {
				for _, d := range c.Devices {
					got[c.Name] = append(got[c.Name], d.Index)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("final cards mismatch (-want +got):\n%s", diff)
			}
			if v := res["c0"].Env[deviceplugin.EnvMPSLimit]; v == "" && res["c1"].Env[deviceplugin.EnvMPSLimit] == "" {
				t.Errorf("no %s set", deviceplugin.EnvMPSLimit)
			}
		})
	}
}

func TestEnvironment(t *testing.T) {
	e := start(t, setup{fakeGPUs: "2xTesla-T4:16GiB,1xA100-SXM4:80GiB"})
	pod := e.bind(util.MakePod("env").GPUMem(4).GPUMemCards(16, 2), map[string][]int{"c0": {2}, "c1": {0, 1}}, time.Now())
	res, err := e.host.Admit(pod)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"c0": {
			"NVIDIA_VISIBLE_DEVICES": e.card(2).UUID, "ALIYUN_COM_GPU_MEM_IDX": "2", "ALIYUN_COM_GPU_MEM_POD": "20",
			"ALIYUN_COM_GPU_MEM_CONTAINER": "4", "ALIYUN_COM_GPU_MEM_DEV": "80", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4G",
			// The fake node states no driver: advisory, said so.
			"GPUSHARE_ISOLATION": "none", "GPUSHARE_MEMORY_LIMIT_MIB": "4096", "GPUSHARE_MEMORY_FRACTION": "0.05",
		},
		"c1": {
			"NVIDIA_VISIBLE_DEVICES": e.card(0).UUID + "," + e.card(1).UUID, "ALIYUN_COM_GPU_MEM_IDX": "0,1", "ALIYUN_COM_GPU_MEM_POD": "20",
			"ALIYUN_COM_GPU_MEM_CONTAINER": "16", "ALIYUN_COM_GPU_MEM_DEV": "16", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=8G,1=8G",
			"GPUSHARE_ISOLATION": "none", "GPUSHARE_MEMORY_LIMIT_MIB": "8192,8192", "GPUSHARE_MEMORY_FRACTION": "0.5,0.5",
		},
	}
	got := map[string]map[string]string{"c0": res["c0"].Env, "c1": res["c1"].Env}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("environment mismatch (-want +got):\n%s", diff)
	}
}

func TestKubeletRestart(t *testing.T) {
	e := start(t, setup{fakeGPUs: "4xTesla-T4:16GiB"})
	at := time.Now()
	var pods []*corev1.Pod
	var adms []admission
	admit := func(from, to int) {
		for i := from; i < to; i++ {
			p := e.bind(util.MakePod(fmt.Sprintf("r-%02d", i)).GPUMem(4), map[string][]int{"c0": {i % 4}}, at)
			pods = append(pods, p)
			res, err := e.host.Admit(p)
			if err != nil {
				t.Fatalf("admitting %s: %v", p.Name, err)
			}
			adms = append(adms, admission{pod: p, results: res})
		}
	}
	admit(0, 6)
	if err := e.host.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := e.host.WaitForResource(e.deadline(15*time.Second), resource, 64); err != nil {
		t.Fatalf("plugin did not re-register after the kubelet restart: %v", err)
	}
	// The pods admitted before still hold their devices in kubelet.
	for _, p := range pods {
		if got := e.host.Devices(p.UID, "c0", resource); len(got) != 4 {
			t.Errorf("after the restart kubelet holds %d devices for %s, want 4", len(got), p.Name)
		}
	}
	admit(6, 14)
	final := e.settle(pods)
	for _, b := range e.check(adms, final) {
		t.Error(b)
	}
}

func TestNoMatchingPod(t *testing.T) {
	e := start(t, setup{fakeGPUs: "1xTesla-T4:16GiB"})
	tests := []struct {
		name    string
		pod     *corev1.Pod
		wantErr string
	}{
		{
			name:    "no allocation annotation",
			pod:     util.MakePod("unscheduled").GPUMem(4).Node(nodeName).Obj(),
			wantErr: "has no gpushare.io/allocation annotation",
		},
		{
			name: "allocation for another node",
			pod: util.MakePod("elsewhere").GPUMem(4).Node(nodeName).Allocation(&gpushare.Allocation{Node: "gpu-b", Unit: "GiB",
				Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, Units: 4}}}}}).Obj(),
			wantErr: "its allocation is for node gpu-b",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := e.client.CoreV1().Pods("default").Create(e.ctx, tc.pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.host.Admit(p)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), handoff.ErrNoMatch.Error()) {
				t.Fatalf("Admit error = %v, want one containing %q", err, tc.wantErr)
			}
			t.Logf("kubelet reports: %v", err)
		})
	}
}

func TestHealthAndRecovery(t *testing.T) {
	e := start(t, setup{fakeGPUs: "2xTesla-T4:16GiB", recovery: 300 * time.Millisecond})
	healthyOf := func(n *corev1.Node) []bool {
		inv, err := gpushare.ParseInventory(n.Annotations[gpushare.AnnotationInventory])
		if err != nil {
			return nil
		}
		var out []bool
		for _, d := range inv.Devices {
			out = append(out, d.Healthy)
		}
		return out
	}
	e.gpus.InjectXID(e.card(1).UUID, 31) // application error: ignored
	e.gpus.SetProbeError(e.card(1).UUID, errors.New("GPU is lost"))
	e.gpus.InjectXID(e.card(1).UUID, 79) // fallen off the bus
	e.waitAllocatable(16)
	e.waitNode(func(n *corev1.Node) bool { return cmp.Equal(healthyOf(n), []bool{true, false}) })
	time.Sleep(time.Second) // past the window, but the probe fails
	if _, alloc := e.host.Capacity(resource); alloc != 16 {
		t.Fatalf("allocatable %d while the card does not answer, want 16", alloc)
	}
	e.gpus.SetProbeError(e.card(1).UUID, nil)
	e.waitAllocatable(32)
	e.waitNode(func(n *corev1.Node) bool { return cmp.Equal(healthyOf(n), []bool{true, true}) })
}

func (e *env) waitAllocatable(n int64) {
	e.t.Helper()
	ctx := e.deadline(10 * time.Second)
	for {
		if _, a := e.host.Capacity(resource); a == n {
			return
		}
		select {
		case <-ctx.Done():
			_, a := e.host.Capacity(resource)
			e.t.Fatalf("allocatable %s is %d, want %d", resource, a, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestReusedCardFull: kubelet must hand an init container's IDs on to the
// app container, on a card it has no other free units of (the init
// container went there because its annotated card was full in kubelet's
// accounting). The app container cannot have its units on one card:
// admission fails with a message saying why, and the plugin goes on
// serving the next pod.
func TestReusedCardFull(t *testing.T) {
	e := start(t, setup{fakeGPUs: "3xTesla-T4:16GiB"})
	at := time.Now()
	for _, p := range []struct {
		name  string
		units int64
		card  int
	}{{"fill-0", 12, 0}, {"fill-1", 16, 1}} {
		pod := e.bind(util.MakePod(p.name).GPUMem(p.units), map[string][]int{"c0": {p.card}}, at)
		if _, err := e.host.Admit(pod); err != nil {
			t.Fatal(err)
		}
	}
	// The extender and kubelet disagree: the extender thinks card 1 has room.
	p := e.bind(util.MakePod("p").InitGPUMem(4).GPUMem(8), map[string][]int{"i0": {1}, "c0": {1}}, at)
	_, err := e.host.Admit(p)
	want := "pod default/p container c0 needs 8 units on each of 1 cards; kubelet must include 4 units of card 0 (reused from the pod's init containers) and has 0 more free there"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Admit error = %v, want one containing %q", err, want)
	}
	t.Logf("kubelet reports: %v", err)
	next := e.bind(util.MakePod("next").GPUMem(8), map[string][]int{"c0": {2}}, at)
	res, err := e.host.Admit(next)
	if err != nil {
		t.Fatalf("admitting a pod after the failed one: %v", err)
	}
	if got := res["c0"].Env[deviceplugin.EnvVisibleDevices]; got != e.card(2).UUID {
		t.Errorf("%s = %q, want card 2 (%s)", deviceplugin.EnvVisibleDevices, got, e.card(2).UUID)
	}
}

// TestUnitChangeWhileDevicesHeld: the plugin restarted with another
// --memory-unit while kubelet lists containers holding devices named in the
// old one (UUID::3 would mean the fourth MiB, not the fourth GiB). It must
// refuse to start, naming both units, the pods and the way out; once the
// pods are gone it starts in the new unit.
func TestUnitChangeWhileDevicesHeld(t *testing.T) {
	e := newEnv(t, setup{fakeGPUs: "1xTesla-T4:16GiB"})
	gib := e.runPlugin(gpushare.UnitGiB)
	select {
	case <-gib.ready:
	case err := <-gib.done:
		t.Fatalf("Run ended before serving: %v", err)
	}
	if err := e.host.WaitForResource(e.deadline(10*time.Second), resource, 16); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for i := 0; i < 2; i++ {
		p := e.bind(util.MakePod(fmt.Sprintf("gib-%d", i)).GPUMem(4), map[string][]int{"c0": {0}}, time.Now())
		if _, err := e.host.Admit(p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	e.waitNode(func(n *corev1.Node) bool {
		inv, err := gpushare.ParseInventory(n.Annotations[gpushare.AnnotationInventory])
		return err == nil && inv.Unit == gpushare.UnitGiB
	})
	if err := gib.stop(); err != nil {
		t.Fatal(err)
	}
	e.waitAllocatable(0) // kubelet has seen it go

	mib := e.runPlugin(gpushare.UnitMiB)
	select {
	case err := <-mib.done:
		for _, want := range []string{"--memory-unit MiB", "published in GiB", "default/gib-0", "default/gib-1", "drain", "--memory-unit GiB"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Run error = %v, want one containing %q", err, want)
			}
		}
		t.Logf("Run refuses: %v", err)
	case <-mib.ready:
		_ = mib.stop()
		t.Fatal("the plugin started in MiB while kubelet lists pods holding GiB devices")
	case <-time.After(30 * time.Second):
		t.Fatal("Run neither served nor failed within 30 s")
	}

	for _, p := range pods {
		e.host.Remove(p.UID)
	}
	mib = e.runPlugin(gpushare.UnitMiB)
	defer func() {
		if err := mib.stop(); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-mib.ready:
	case err := <-mib.done:
		t.Fatalf("Run on an idle node: %v", err)
	}
	if err := e.host.WaitForResource(e.deadline(10*time.Second), resource, 16384); err != nil {
		t.Fatal(err)
	}
	e.waitNode(func(n *corev1.Node) bool {
		inv, err := gpushare.ParseInventory(n.Annotations[gpushare.AnnotationInventory])
		return err == nil && inv.Unit == gpushare.UnitMiB
	})
}

// TestDeviceListStrategies: what kubelet hands the container runtime for
// one container on two cards, with each --device-list-strategy. With
// volume-mounts and cdi-cri the runtime learns the cards from the mounts
// or the CDI device names, which an image or pod setting
// NVIDIA_VISIBLE_DEVICES=all cannot widen once the NVIDIA container
// toolkit ignores that variable (see docs/reference/device-plugin.md).
func TestDeviceListStrategies(t *testing.T) {
	type runtimeView struct {
		VisibleDevices string
		Mounts         []devicehost.Mount
		CDIDevices     []string
		Annotations    map[string]string
	}
	tests := []struct {
		strategy string
		want     func(uuids []string) runtimeView
	}{
		{strategy: "envvar", want: func(u []string) runtimeView {
			return runtimeView{VisibleDevices: u[0] + "," + u[1], Annotations: map[string]string{}}
		}},
		{strategy: "cdi-annotations", want: func(u []string) runtimeView {
			return runtimeView{VisibleDevices: "void", Annotations: map[string]string{"cdi.k8s.io/gpushare_gpu-mem": "nvidia.com/gpu=" + u[0] + ",nvidia.com/gpu=" + u[1]}}
		}},
		{strategy: "volume-mounts", want: func(u []string) runtimeView {
			return runtimeView{VisibleDevices: "/var/run/nvidia-container-devices", Annotations: map[string]string{}, Mounts: []devicehost.Mount{
				{ContainerPath: "/var/run/nvidia-container-devices/" + u[0], HostPath: "/dev/null", ReadOnly: true},
				{ContainerPath: "/var/run/nvidia-container-devices/" + u[1], HostPath: "/dev/null", ReadOnly: true},
			}}
		}},
		{strategy: "cdi-cri", want: func(u []string) runtimeView {
			return runtimeView{VisibleDevices: "void", Annotations: map[string]string{}, CDIDevices: []string{"nvidia.com/gpu=" + u[0], "nvidia.com/gpu=" + u[1]}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.strategy, func(t *testing.T) {
			e := start(t, setup{fakeGPUs: "2xTesla-T4:16GiB", strategy: tc.strategy})
			pod := e.bind(util.MakePod("two-cards").GPUMemCards(8, 2), map[string][]int{"c0": {0, 1}}, time.Now())
			res, err := e.host.Admit(pod)
			if err != nil {
				t.Fatal(err)
			}
			r := res["c0"]
			got := runtimeView{VisibleDevices: r.Env[deviceplugin.EnvVisibleDevices], Mounts: r.Mounts, CDIDevices: r.CDIDevices, Annotations: r.Annotations}
			if diff := cmp.Diff(tc.want([]string{e.card(0).UUID, e.card(1).UUID}), got); diff != "" {
				t.Errorf("what kubelet hands the runtime (-want +got):\n%s", diff)
			}
		})
	}
}

// runDevicePlugin builds the device plugin from cfg and serves it until
// ctx ends.
func runDevicePlugin(ctx context.Context, cfg deviceplugin.Config) error {
	p, err := deviceplugin.New(ctx, cfg)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}
