package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/dra/pkg/driver"
	"github.com/gpushare/gpushare/dra/pkg/prepare"
	"github.com/gpushare/gpushare/dra/test/kubeletclient"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// draCluster is a Kubernetes 1.37 control plane whose kube-scheduler
// allocates claims on the slices of in-process DRA drivers, one per
// API-only node, and whose kube-controller-manager makes claims from
// templates. The test plays kubelet: it calls each driver's socket.
type draCluster struct {
	cp    *framework.ControlPlane
	admin kubernetes.Interface
	// nodes: node name -> its driver.
	nodes map[string]*draNode
}

// draNode is one node's driver, restartable with its directories.
type draNode struct {
	name, gpus string
	kubeletDir string
	cdiDir     string
	// control is the fake GPUs' control file (gpu.Fake.FollowControl).
	control string
	driver  *driver.Driver
	// stop ends the driver and waits for it.
	stop func()
}

// startDRA starts the control plane and a driver for each node (node ->
// fake GPU spec).
func startDRA(t *testing.T, nodes map[string]string) *draCluster {
	t.Helper()
	return startDRAWith(t, nodes, "")
}

// startDRAWith is startDRA with kube-scheduler calling the extenders of
// config/kube-scheduler-config.yaml at extenderURL ("": none).
func startDRAWith(t *testing.T, nodes map[string]string, extenderURL string) *draCluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	cp := framework.StartT(t, framework.Options{
		KubernetesVersion: framework.KubernetesVersion,
		Scheduler:         true,
		ExtenderURL:       extenderURL,
		Controllers:       []string{"resourceclaim-controller"},
	})
	ctx := context.Background()
	c := &draCluster{cp: cp, admin: cp.Client(framework.AdminUser), nodes: map[string]*draNode{}}
	if _, err := c.admin.ResourceV1().DeviceClasses().Create(ctx, devices.DeviceClass(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range slices.Sorted(maps.Keys(nodes)) {
		if err := framework.CreateNode(ctx, c.admin, util.MakeNode(name).Obj()); err != nil {
			t.Fatal(err)
		}
		n := &draNode{name: name, gpus: nodes[name], kubeletDir: t.TempDir(), cdiDir: t.TempDir()}
		n.control = filepath.Join(n.kubeletDir, "fake-control")
		c.nodes[name] = n
		c.startDriver(t, n)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			n.stop()
		}
	})
	c.waitSlices(t, len(nodes))
	return c
}

// startDriver runs n's driver in this process until n.stop, and waits
// until it serves.
func (c *draCluster) startDriver(t *testing.T, n *draNode) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *driver.Driver, 1)
	done := make(chan error, 1)
	go func() {
		done <- driver.Run(ctx, driver.Config{
			NodeName: n.name, FakeGPUs: n.gpus, FakeDriver: "615.00", Isolation: "auto",
			KubeletDir: n.kubeletDir, CDIDir: n.cdiDir, CDIHook: "/usr/bin/nvidia-cdi-hook",
			HealthCheck: true, FakeControl: n.control, Client: c.admin, RegistrationDisabled: true,
			OnReady: func(d *driver.Driver) { ready <- d },
		})
	}()
	select {
	case n.driver = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("the DRA driver of %s ended: %v", n.name, err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("the DRA driver of %s did not start within 30s", n.name)
	}
	var once sync.Once
	n.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("the DRA driver of %s: %v", n.name, err)
			}
		})
	}
}

// waitSlices waits until n nodes have published a slice.
func (c *draCluster) waitSlices(t *testing.T, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == n, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d ResourceSlices: %v", n, err)
	}
}

// claimSpec asks gib GiB of one card of the driver's DeviceClass.
func claimSpec(gib int64) resourceapi.ResourceClaimSpec {
	return resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
		Name: "gpu",
		Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: devices.DeviceClassName,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
				devices.CapacityMemory: *resource.NewQuantity(gib<<30, resource.BinarySI),
			}},
		},
	}}}}
}

// createTemplate creates the ResourceClaimTemplate gpu-<gib>gi.
func (c *draCluster) createTemplate(t *testing.T, gib int64) string {
	t.Helper()
	name := fmt.Sprintf("gpu-%dgi", gib)
	_, err := c.admin.ResourceV1().ResourceClaimTemplates("default").Create(context.Background(), &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       resourceapi.ResourceClaimTemplateSpec{Spec: claimSpec(gib)},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return name
}

// createClaimPod creates a pod whose container uses one claim: from the
// template, or the claim itself when claim is set.
func (c *draCluster) createClaimPod(t *testing.T, name, template, claim string) {
	t.Helper()
	pc := corev1.PodResourceClaim{Name: "gpu"}
	if claim != "" {
		pc.ResourceClaimName = ptr.To(claim)
	} else {
		pc.ResourceClaimTemplateName = ptr.To(template)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers:     []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
			ResourceClaims: []corev1.PodResourceClaim{pc},
		},
	}
	if _, err := c.admin.CoreV1().Pods("default").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podClaim returns the claim a pod's "gpu" entry names (for a template,
// once kube-controller-manager made it).
func (c *draCluster) podClaim(ctx context.Context, pod *corev1.Pod) (*resourceapi.ResourceClaim, error) {
	return c.podClaimNamed(ctx, pod, "gpu")
}

// podClaimNamed is podClaim for the pod's entry named entry.
func (c *draCluster) podClaimNamed(ctx context.Context, pod *corev1.Pod, entry string) (*resourceapi.ResourceClaim, error) {
	name := ""
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == entry && s.ResourceClaimName != nil {
			name = *s.ResourceClaimName
		}
	}
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.ResourceClaimName != nil {
			name = *pc.ResourceClaimName
		}
	}
	if name == "" {
		return nil, fmt.Errorf("pod %s has no claim yet", pod.Name)
	}
	return c.admin.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
}

// waitPod waits until pod is bound (or, with bound false, until the
// scheduler has found no node for it) and returns it.
func (c *draCluster) waitPod(t *testing.T, name string, bound bool) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pod = p
		if bound {
			return p.Spec.NodeName != "", nil
		}
		return util.SchedulingFailed(p), nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s (bound %v): %v; last: node %q, conditions %+v", name, bound, err, pod.Spec.NodeName, pod.Status.Conditions)
	}
	return pod
}

// allocation is where a claim's one result went.
type allocation struct {
	pool, device string
	mib          int64
	share        string
}

func allocationOf(t *testing.T, claim *resourceapi.ResourceClaim) allocation {
	t.Helper()
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim %s: allocation %+v, want one result", claim.Name, claim.Status.Allocation)
	}
	r := claim.Status.Allocation.Devices.Results[0]
	q := r.ConsumedCapacity[devices.CapacityMemory]
	a := allocation{pool: r.Pool, device: r.Device, mib: q.Value() >> 20}
	if r.ShareID != nil {
		a.share = string(*r.ShareID)
	}
	return a
}

// prepare plays kubelet: NodePrepareResources on the node's driver socket
// for claims, and returns each claim's CDI device IDs or error.
func (n *draNode) prepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) (map[types.UID][]string, error) {
	return n.kubelet().Prepare(ctx, claimsOf(claims)...)
}

// kubelet is the client of n's driver socket.
func (n *draNode) kubelet() kubeletclient.Client {
	return kubeletclient.Client{Socket: filepath.Join(n.kubeletDir, "plugins", devices.DriverName, "dra.sock")}
}

func claimsOf(claims []*resourceapi.ResourceClaim) []kubeletclient.Claim {
	out := make([]kubeletclient.Claim, len(claims))
	for i, c := range claims {
		out[i] = kubeletclient.ClaimOf(c)
	}
	return out
}

// TestDRASharing: claims of 4, 8 and 4 GiB share the first 16 GiB card
// (first fit, in slice order), 12 GiB takes the second, 10 GiB waits until
// kube-controller-manager deletes the 12 GiB pod's claim with its pod.
// The claims' kubelet side: the driver prepares them and counts 16 GiB on
// gpu-0, and refuses a claim whose allocation (written by hand) would
// take gpu-0 over 16 GiB.
func TestDRASharing(t *testing.T) {
	c := startDRA(t, map[string]string{"dra-a": "2xTesla-T4:16GiB"})
	ctx := context.Background()
	for _, gib := range []int64{4, 8, 10, 12} {
		c.createTemplate(t, gib)
	}
	if _, err := c.admin.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "direct-4gi"}, Spec: claimSpec(4),
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		pod, template, claim string
		device               string
		mib                  int64
	}{
		{pod: "p4a", template: "gpu-4gi", device: "gpu-0", mib: 4096},
		{pod: "p8", template: "gpu-8gi", device: "gpu-0", mib: 8192},
		{pod: "p4b", claim: "direct-4gi", device: "gpu-0", mib: 4096},
		{pod: "p12", template: "gpu-12gi", device: "gpu-1", mib: 12288},
	}
	var onCard0 []*resourceapi.ResourceClaim
	shares := map[string]bool{}
	for _, s := range steps {
		c.createClaimPod(t, s.pod, s.template, s.claim)
		pod := c.waitPod(t, s.pod, true)
		claim, err := c.podClaim(ctx, pod)
		if err != nil {
			t.Fatal(err)
		}
		got := allocationOf(t, claim)
		if got.pool != "dra-a" || got.device != s.device || got.mib != s.mib || got.share == "" {
			t.Errorf("pod %s: allocation %+v, want %d MiB of dra-a/%s with a share ID", s.pod, got, s.mib, s.device)
		}
		if shares[got.share] {
			t.Errorf("pod %s: share ID %s given twice", s.pod, got.share)
		}
		shares[got.share] = true
		if s.device == "gpu-0" {
			onCard0 = append(onCard0, claim)
		}
	}
	c.createClaimPod(t, "p10", "gpu-10gi", "")
	waiting := c.waitPod(t, "p10", false)
	if msg := podScheduledMessage(waiting); !strings.Contains(msg, "cannot allocate all claims") {
		t.Errorf("p10 waits saying %q, want DRA's \"cannot allocate all claims\"", msg)
	}

	node := c.nodes["dra-a"]
	ids, err := node.prepare(ctx, onCard0...)
	if err != nil {
		t.Fatal(err)
	}
	for _, cl := range onCard0 {
		if want := prepare.DeviceID(cl.UID, "gpu"); len(ids[cl.UID]) == 0 || ids[cl.UID][0] != want {
			t.Errorf("claim %s: CDI devices %v, want %s first", cl.Name, ids[cl.UID], want)
		}
	}
	if got := node.driver.State().Used()["gpu-0"]; got != 16384 {
		t.Errorf("the driver counts %d MiB prepared on gpu-0, want 16384", got)
	}

	// The last line of defense: an allocation that over-commits gpu-0,
	// written by hand, is refused at prepare.
	rogue, err := c.admin.ResourceV1().ResourceClaims("default").Create(ctx, &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "rogue"}, Spec: claimSpec(2),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rogue.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
		Request: "gpu", Driver: devices.DriverName, Pool: "dra-a", Device: "gpu-0", ShareID: ptr.To(types.UID("0c1f2b6e-0000-4000-8000-000000000001")),
		ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{devices.CapacityMemory: resource.MustParse("2Gi")},
	}}}}
	if rogue, err = c.admin.ResourceV1().ResourceClaims("default").UpdateStatus(ctx, rogue, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := node.prepare(ctx, rogue); err == nil || !strings.Contains(err.Error(), "refusing to over-commit") {
		t.Errorf("preparing a claim over gpu-0's capacity: err = %v, want a refusal", err)
	}

	// kube-controller-manager deletes p12's claim with p12; p10 then fits gpu-1.
	if err := c.admin.CoreV1().Pods("default").Delete(ctx, "p12", metav1.DeleteOptions{GracePeriodSeconds: ptr.To(int64(0))}); err != nil {
		t.Fatal(err)
	}
	pod := c.waitPod(t, "p10", true)
	claim, err := c.podClaim(ctx, pod)
	if err != nil {
		t.Fatal(err)
	}
	if got := allocationOf(t, claim); got.device != "gpu-1" || got.mib != 10240 {
		t.Errorf("p10 after p12 left: %+v, want 10240 MiB of gpu-1", got)
	}
}

func podScheduledMessage(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Message
		}
	}
	return ""
}

// TestDRABurst: 200 claim pods of 1 to 8 GiB, created at once, over 3
// nodes of two 16 GiB and two 24 GiB cards (240 GiB for about 750 GiB
// asked). kube-scheduler allocates; then the test plays kubelet and
// prepares each node's claims in shuffled order, 8 at a time. No card is
// over its capacity, by the claims' allocations or by what the drivers
// prepared; every pod left waiting asks more than any card has free;
// every bound pod's claim is prepared. Then one driver restarts and
// answers the same for the same claims (kubelet asks again after its own
// restart), and unprepares them all.
func TestDRABurst(t *testing.T) {
	const spec = "2xTesla-T4:16GiB,2xA10:24GiB"
	c := startDRA(t, map[string]string{"dra-1": spec, "dra-2": spec, "dra-3": spec})
	ctx := context.Background()
	sizes := []int64{1, 2, 4, 8}
	for _, gib := range sizes {
		c.createTemplate(t, gib)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	asked := map[string]int64{} // pod -> GiB
	var created sync.WaitGroup
	errs := make(chan error, 200)
	sem := make(chan struct{}, 16)
	for i := range 200 {
		gib := sizes[rng.IntN(len(sizes))]
		name := fmt.Sprintf("burst-%03d", i)
		asked[name] = gib
		created.Add(1)
		sem <- struct{}{}
		go func() {
			defer created.Done()
			defer func() { <-sem }()
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
				Spec: corev1.PodSpec{
					Containers:     []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
					ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(fmt.Sprintf("gpu-%dgi", gib))}},
				},
			}
			if _, err := c.admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	created.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Settled: every pod bound or found no node, and the count of bound
	// pods the same for 3 s.
	var pods []corev1.Pod
	lastBound, stableSince := -1, time.Now()
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := c.admin.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pods = l.Items
		bound, decided := 0, 0
		for i := range pods {
			switch {
			case pods[i].Spec.NodeName != "":
				bound++
				decided++
			case util.SchedulingFailed(&pods[i]):
				decided++
			}
		}
		if bound != lastBound {
			lastBound, stableSince = bound, time.Now()
		}
		return decided == len(asked) && time.Since(stableSince) > 3*time.Second, nil
	})
	if err != nil {
		t.Fatalf("waiting for the burst to settle: %v (%d bound)", err, lastBound)
	}

	// Capacity and use per device, from the claims' allocations.
	capMiB := map[string]int64{}
	slicesList, err := c.admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range slicesList.Items {
		for _, d := range s.Spec.Devices {
			q := d.Capacity[devices.CapacityMemory].Value
			capMiB[s.Spec.Pool.Name+"/"+d.Name] = q.Value() >> 20
		}
	}
	used := map[string]int64{}
	byNode := map[string][]*resourceapi.ResourceClaim{}
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName == "" {
			continue
		}
		claim, err := c.podClaim(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		a := allocationOf(t, claim)
		if a.pool != p.Spec.NodeName {
			t.Errorf("pod %s is on %s and its claim on %s", p.Name, p.Spec.NodeName, a.pool)
		}
		if a.mib != asked[p.Name]<<10 {
			t.Errorf("pod %s asked %d GiB and its claim holds %d MiB", p.Name, asked[p.Name], a.mib)
		}
		used[a.pool+"/"+a.device] += a.mib
		byNode[a.pool] = append(byNode[a.pool], claim)
	}
	free := map[string]int64{}
	for dev, total := range capMiB {
		if used[dev] > total {
			t.Errorf("%s: claims hold %d MiB of %d", dev, used[dev], total)
		}
		free[dev] = total - used[dev]
	}
	waiting := 0
	for i := range pods {
		p := &pods[i]
		if p.Spec.NodeName != "" {
			continue
		}
		waiting++
		for dev, f := range free {
			if f >= asked[p.Name]<<10 {
				t.Errorf("pod %s waits for %d GiB while %s has %d MiB free", p.Name, asked[p.Name], dev, f)
			}
		}
	}
	t.Logf("burst: %d pods bound, %d waiting; %d claims allocated; use per card (MiB): %v of %v", len(pods)-waiting, waiting, len(pods)-waiting, used, capMiB)

	// Shuffled admission: each node's claims prepared in random order, 8
	// at a time.
	prepared := map[types.UID][]string{}
	var mu sync.Mutex
	for _, node := range slices.Sorted(maps.Keys(byNode)) {
		claims := byNode[node]
		rng.Shuffle(len(claims), func(i, j int) { claims[i], claims[j] = claims[j], claims[i] })
		var wg sync.WaitGroup
		sem := make(chan struct{}, 8)
		for _, cl := range claims {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				ids, err := c.nodes[node].prepare(ctx, cl)
				if err != nil {
					t.Errorf("preparing claim %s on %s: %v", cl.Name, node, err)
					return
				}
				mu.Lock()
				prepared[cl.UID] = ids[cl.UID]
				mu.Unlock()
			}()
		}
		wg.Wait()
		for dev, mib := range c.nodes[node].driver.State().Used() {
			if want := used[node+"/"+dev]; mib != want {
				t.Errorf("driver of %s counts %d MiB on %s, the claims %d", node, mib, dev, want)
			}
		}
	}

	// The driver of dra-1 restarts: it keeps its claims, answers the same.
	n := c.nodes["dra-1"]
	before := n.driver.State().Used()
	n.stop()
	c.startDriver(t, n)
	if diff := cmpUsed(before, n.driver.State().Used()); diff != "" {
		t.Errorf("after a driver restart: %s", diff)
	}
	again, err := n.prepare(ctx, byNode["dra-1"]...)
	if err != nil {
		t.Fatalf("preparing dra-1's claims again after the restart: %v", err)
	}
	for _, cl := range byNode["dra-1"] {
		if !slices.Equal(again[cl.UID], prepared[cl.UID]) {
			t.Errorf("claim %s: CDI devices %v after the restart, %v before", cl.Name, again[cl.UID], prepared[cl.UID])
		}
	}
	if err := n.unprepare(ctx, byNode["dra-1"]...); err != nil {
		t.Fatal(err)
	}
	if got := n.driver.State().Used(); len(got) != 0 {
		t.Errorf("dra-1 after unpreparing every claim: %v, want nothing held", got)
	}
}

func cmpUsed(want, got map[string]int64) string {
	if len(want) != len(got) {
		return fmt.Sprintf("use %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Sprintf("use %v, want %v", got, want)
		}
	}
	return ""
}

// unprepare plays kubelet: NodeUnprepareResources for claims.
func (n *draNode) unprepare(ctx context.Context, claims ...*resourceapi.ResourceClaim) error {
	_, err := n.kubelet().Unprepare(ctx, claimsOf(claims)...)
	return err
}

// TestDRAUnhealthyCardTainted: a critical XID on gpu-0 (through the fake
// GPUs' control file) taints its device in the ResourceSlice, which the
// 1.37 API keeps, and kube-scheduler then gives a 4 GiB claim gpu-1, the
// second in slice order.
func TestDRAUnhealthyCardTainted(t *testing.T) {
	c := startDRA(t, map[string]string{"dra-x": "2xTesla-T4:16GiB"})
	ctx := context.Background()
	if err := os.WriteFile(c.nodes["dra-x"].control, []byte("xid 0 79\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var taints []resourceapi.DeviceTaint
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := c.admin.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 {
			return false, nil
		}
		for _, d := range l.Items[0].Spec.Devices {
			if d.Name == "gpu-0" {
				taints = d.Taints
			}
		}
		return len(taints) == 1, nil
	})
	if err != nil {
		t.Fatalf("waiting for gpu-0's taint in the slice: %v (taints %+v)", err, taints)
	}
	if taints[0].Key != devices.TaintUnhealthy || taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("gpu-0's taint: %+v, want %s NoSchedule", taints[0], devices.TaintUnhealthy)
	}
	c.createTemplate(t, 4)
	c.createClaimPod(t, "after-xid", "gpu-4gi", "")
	claim, err := c.podClaim(ctx, c.waitPod(t, "after-xid", true))
	if err != nil {
		t.Fatal(err)
	}
	if got := allocationOf(t, claim); got.device != "gpu-1" {
		t.Errorf("a 4 GiB claim after an XID on gpu-0: %+v, want gpu-1", got)
	}
}
