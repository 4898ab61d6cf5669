package integration

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/feed"
	"github.com/gpushare/gpushare/pkg/leader"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// laggingTransport can hold back what the pod watches deliver (the
// informer then lags: events wait in the connection) and can cut the
// replica off from the API altogether (a killed process).
type laggingTransport struct {
	next http.RoundTripper
	// paused: reads of pod watch bodies block until resume closes.
	mu      sync.Mutex
	resumed chan struct{}
	dead    atomic.Bool
}

func newLaggingTransport() *laggingTransport {
	r := make(chan struct{})
	close(r)
	return &laggingTransport{resumed: r}
}

func (l *laggingTransport) pause() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.resumed = make(chan struct{})
}

func (l *laggingTransport) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.resumed:
	default:
		close(l.resumed)
	}
}

func (l *laggingTransport) gate() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.resumed
}

func (l *laggingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if l.dead.Load() {
		return nil, errors.New("test: this replica was killed")
	}
	resp, err := l.next.RoundTrip(req)
	if err == nil && req.URL.Query().Get("watch") == "true" && strings.HasSuffix(req.URL.Path, "/pods") {
		resp.Body = &laggingBody{ReadCloser: resp.Body, t: l, ctx: req.Context()}
	}
	return resp, err
}

// laggingBody is a pod watch's body whose reads wait while paused.
type laggingBody struct {
	io.ReadCloser
	t   *laggingTransport
	ctx context.Context
}

func (b *laggingBody) Read(p []byte) (int, error) {
	select {
	case <-b.t.gate():
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	}
	return b.ReadCloser.Read(p)
}

// replica is one extender replica's deciding parts, as extender.New wires
// them: informers feeding a cache, a binder whose Bindings the gate fences.
type replica struct {
	name      string
	transport *laggingTransport
	client    kubernetes.Interface
	cache     *cache.Cache
	feeder    *feed.Feeder
	gate      *leader.Gate
	binder    *extender.Binder
	ctx       context.Context
	stop      context.CancelFunc
	done      chan struct{}
}

// startReplica starts a replica's informers with the extender's service
// account (manifests/extender/rbac.yaml) and waits for their sync.
// catchUp false leaves out the catch-up: the control case.
func startReplica(t *testing.T, name, kubeconfig string, catchUp bool, renewDeadline time.Duration) *replica {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	ctx, stop := context.WithCancel(klog.NewContext(context.Background(), logger.WithName(name)))
	t.Cleanup(stop)
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{name: name, transport: newLaggingTransport(), ctx: ctx, stop: stop, done: make(chan struct{})}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { r.transport.next = rt; return r.transport }
	cfg.QPS, cfg.Burst = 100, 200
	r.client = kubernetes.NewForConfigOrDie(rest.CopyConfig(cfg))
	if r.cache, err = cache.New(cache.Config{Policy: allocator.NameBinpack}); err != nil {
		t.Fatal(err)
	}
	if r.feeder, err = feed.New(ctx, r.cache, r.client); err != nil {
		t.Fatal(err)
	}
	catchUpFn := r.feeder.CatchUp
	if !catchUp {
		catchUpFn = func(context.Context) (int, error) { return 0, nil }
	}
	r.gate = leader.NewGate(catchUpFn, renewDeadline, true, nil)
	if r.binder, err = extender.NewBinder(extender.BinderConfig{Cache: r.cache, API: extender.ClientPodAPI{Client: r.client}, Pods: r.feeder, Fence: r.gate}); err != nil {
		t.Fatal(err)
	}
	r.feeder.Start(ctx)
	if !r.feeder.WaitForSync(ctx) {
		t.Fatalf("%s: informers did not sync", name)
	}
	return r
}

// waitServing waits until r serves (leads and has caught up).
func waitServing(t *testing.T, r *replica, timeout time.Duration) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return r.gate.Serving(), nil
	}); err != nil {
		t.Fatalf("%s never served: %v", r.name, err)
	}
}

func (r *replica) bind(ctx context.Context, admin kubernetes.Interface, name string) error {
	p, err := admin.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return r.binder.Bind(ctx, "default", name, p.UID, "n1")
}

// haCluster starts a control plane (no scheduler calls the replicas: the
// test binds as kube-scheduler would) with node n1, one 16 GiB card, and
// pending pods a and b of 16 GiB each; it returns the admin client and the
// extender's service-account kubeconfig.
func haCluster(t *testing.T) (kubernetes.Interface, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	cp := framework.StartT(t, framework.Options{})
	admin := cp.Client(framework.AdminUser)
	applyManifests(t, admin, "manifests/extender/rbac.yaml")
	kc, err := cp.ServiceAccountKubeconfig(ctx, "kube-system", "gpushare-scheduler-extender", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := createNode(ctx, admin, util.MakeNode("n1").Cards("T4", 16).Obj()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a", "b"} {
		pod := util.MakePod(name).GPUMem(16).Obj()
		pod.UID = ""
		if _, err := admin.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return admin, kc
}

// failover is what a handover does to the old leader's replica.
type failover int

const (
	// killed: cut off from the API at once (SIGKILL): the Lease is not
	// released and the next replica waits out the lease duration.
	killed failover = iota
	// stopped: its context ends (SIGTERM): it releases the Lease.
	stopped
)

// TestLeaderFailoverKeepsCards: standalone replicas with --leader-elect.
// The leader binds pod a on n1's only card and goes away right after the
// Binding commits; the follower's pod informer is held back, so it still
// sees a pending and the card free. Once it leads it must not give the
// card to pod b. The control case leaves out the catch-up and shows the
// over-commit the lagging informer causes without it.
func TestLeaderFailoverKeepsCards(t *testing.T) {
	for _, tc := range []struct {
		name    string
		how     failover
		catchUp bool
	}{
		{name: "leader killed", how: killed, catchUp: true},
		{name: "leader stopped and released the lease", how: stopped, catchUp: true},
		{name: "control: without the catch-up the card is handed out twice", how: killed, catchUp: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			admin, kc := haCluster(t)
			ctx := context.Background()
			elect := func(identity string) leader.ElectConfig {
				return leader.ElectConfig{Namespace: "kube-system", Name: "gpushare-scheduler-extender", Identity: identity,
					LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}
			}
			r1 := startReplica(t, "extender-1", kc, tc.catchUp, 2*time.Second)
			go func() { defer close(r1.done); _ = leader.Elect(r1.ctx, r1.client, elect("extender-1"), r1.gate) }()
			waitServing(t, r1, 30*time.Second)
			r2 := startReplica(t, "extender-2", kc, tc.catchUp, 2*time.Second)
			go func() { defer close(r2.done); _ = leader.Elect(r2.ctx, r2.client, elect("extender-2"), r2.gate) }()
			defer func() { r2.stop(); <-r2.done }()

			// The follower's informer stops hearing of pods.
			r2.transport.pause()
			defer r2.transport.resume()
			if err := r2.bind(ctx, admin, "b"); !errors.Is(err, leader.ErrNotLeader) {
				t.Fatalf("the follower's bind of b = %v, want ErrNotLeader", err)
			}
			if err := r1.bind(ctx, admin, "a"); err != nil {
				t.Fatalf("the leader's bind of a: %v", err)
			}
			switch tc.how {
			case killed:
				r1.transport.dead.Store(true)
				r1.stop()
			case stopped:
				r1.stop()
			}
			<-r1.done
			if _, ok := r2.feeder.Pod("default", "a"); !ok {
				t.Fatal("the follower's informer does not hold pod a")
			}
			if p, _ := r2.feeder.Pod("default", "a"); p.NodeName != "" {
				t.Fatalf("the follower's informer already shows a bound to %s: the lag was not held", p.NodeName)
			}
			waitServing(t, r2, 30*time.Second)
			if l, err := admin.CoordinationV1().Leases("kube-system").Get(ctx, "gpushare-scheduler-extender", metav1.GetOptions{}); err != nil || ptr.Deref(l.Spec.HolderIdentity, "") != "extender-2" {
				t.Fatalf("lease %v, %v; want it held by extender-2", l, err)
			}

			err := r2.bind(ctx, admin, "b")
			b, gerr := admin.CoreV1().Pods("default").Get(ctx, "b", metav1.GetOptions{})
			if gerr != nil {
				t.Fatal(gerr)
			}
			if !tc.catchUp {
				if err != nil || b.Spec.NodeName != "n1" {
					t.Fatalf("control: b = %v on %q; the lagging informer should have let the new leader over-commit n1", err, b.Spec.NodeName)
				}
				return
			}
			var fit *allocator.FitError
			if !errors.As(err, &fit) || b.Spec.NodeName != "" {
				t.Fatalf("the new leader bound b: %v, b on %q; a holds n1's only card (32 GiB on 16)", err, b.Spec.NodeName)
			}
		})
	}
}

// TestSidecarFollowsSchedulerLease: the sidecar topology. Each
// kube-scheduler replica has its extender beside it, following the
// scheduler's Lease (the test plays the schedulers' election by writing
// it). The first scheduler's sidecar binds pod a; the Lease moves to the
// second scheduler, whose sidecar's informer lags: it must catch up before
// it serves and refuse b, and the first sidecar must stop binding.
func TestSidecarFollowsSchedulerLease(t *testing.T) {
	admin, kc := haCluster(t)
	ctx := context.Background()
	leases := admin.CoordinationV1().Leases("kube-system")
	now := func() *metav1.MicroTime { return &metav1.MicroTime{Time: time.Now()} }
	lease, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-scheduler"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("scheduler-1_0b1c"), LeaseDurationSeconds: ptr.To[int32](15),
			AcquireTime: now(), RenewTime: now(), LeaseTransitions: ptr.To[int32](0)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	follow := func(r *replica, identity string) {
		go func() {
			defer close(r.done)
			_ = leader.Follow(r.ctx, r.client, leader.FollowConfig{Namespace: "kube-system", Name: "kube-scheduler", Identity: identity}, r.gate)
		}()
		t.Cleanup(func() { r.stop(); <-r.done })
	}
	s1 := startReplica(t, "sidecar-1", kc, true, 10*time.Second)
	follow(s1, "scheduler-1")
	s2 := startReplica(t, "sidecar-2", kc, true, 10*time.Second)
	follow(s2, "scheduler-2")
	waitServing(t, s1, 30*time.Second)
	if s2.gate.Serving() {
		t.Fatal("the sidecar of the scheduler that does not lead serves")
	}

	s2.transport.pause()
	defer s2.transport.resume()
	if err := s1.bind(ctx, admin, "a"); err != nil {
		t.Fatalf("the leading sidecar's bind of a: %v", err)
	}
	// scheduler-1 dies; scheduler-2 takes the Lease.
	lease.Spec.HolderIdentity = ptr.To("scheduler-2_7f3e")
	lease.Spec.AcquireTime, lease.Spec.RenewTime = now(), now()
	lease.Spec.LeaseTransitions = ptr.To[int32](1)
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitServing(t, s2, 30*time.Second)
	if p, _ := s2.feeder.Pod("default", "a"); p == nil || p.NodeName != "" {
		t.Fatalf("the second sidecar's informer already shows a bound: the lag was not held")
	}
	err = s2.bind(ctx, admin, "b")
	var fit *allocator.FitError
	if b, _ := admin.CoreV1().Pods("default").Get(ctx, "b", metav1.GetOptions{}); !errors.As(err, &fit) || b.Spec.NodeName != "" {
		t.Fatalf("the new leader's sidecar bound b: %v, b on %q; a holds n1's only card", err, b.Spec.NodeName)
	}
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return !s1.gate.Serving(), nil
	}); err != nil {
		t.Fatal("the first sidecar still serves after its scheduler lost the Lease")
	}
	if _, _, err := s1.gate.Fence(ctx); !errors.Is(err, leader.ErrNotLeader) {
		t.Errorf("the first sidecar's fence = %v, want ErrNotLeader", err)
	}
}

// TestElectedReplicasOneReady: two extenders run as the binary runs them
// (extender.New and Run with --leader-elect): exactly one reports ready and
// answers filter; when it stops, the other takes over.
func TestElectedReplicasOneReady(t *testing.T) {
	_, kc := haCluster(t)
	type ext struct {
		listen string
		stop   context.CancelFunc
		done   chan error
	}
	start := func(identity string) *ext {
		e := &ext{listen: util.FreeAddr(t), done: make(chan error, 1)}
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().WithName(identity)))
		e.stop = cancel
		go func() {
			e.done <- runExtenderConfig(ctx, extender.Config{Kubeconfig: kc, Listen: e.listen, Policy: allocator.DefaultPolicy, QPS: 100, Burst: 200,
				LeaderElect: true, Election: leader.ElectConfig{Namespace: "kube-system", Name: "gpushare-scheduler-extender", Identity: identity,
					LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 250 * time.Millisecond}})
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-e.done; err != nil {
				t.Errorf("extender %s: %v", identity, err)
			}
		})
		return e
	}
	status := func(e *ext, method, path string) int {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"Pod":{"metadata":{"name":"b","namespace":"default"}},"NodeNames":["n1"]}`)
		}
		req, _ := http.NewRequest(method, "http://"+e.listen+path, body)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	exts := []*ext{start("extender-1"), start("extender-2")}
	var leaderIdx int
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		ready := 0
		for i, e := range exts {
			if status(e, http.MethodGet, "/readyz") == http.StatusOK {
				ready++
				leaderIdx = i
			}
		}
		return ready == 1, nil
	}); err != nil {
		t.Fatal("never exactly one ready replica")
	}
	follower := exts[1-leaderIdx]
	if got := status(follower, http.MethodPost, extender.Prefix+"/filter"); got != http.StatusServiceUnavailable {
		t.Errorf("the follower's filter = %d, want 503", got)
	}
	if got := status(exts[leaderIdx], http.MethodPost, extender.Prefix+"/filter"); got != http.StatusOK {
		t.Errorf("the leader's filter = %d, want 200", got)
	}
	exts[leaderIdx].stop()
	if err := <-exts[leaderIdx].done; err != nil {
		t.Errorf("the leader stopped with %v", err)
	}
	exts[leaderIdx].done <- nil // for the cleanup
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return status(follower, http.MethodGet, "/readyz") == http.StatusOK, nil
	}); err != nil {
		t.Fatal("the follower never became ready after the leader stopped")
	}
	if got := status(follower, http.MethodPost, extender.Prefix+"/filter"); got != http.StatusOK {
		t.Errorf("the new leader's filter = %d, want 200", got)
	}
}
