package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/kubelet/devicehost"
)

// Test-only pod annotations written at admission.
const (
	// AnnotationEnv is JSON: container name -> the environment kubelet's
	// device manager gave the container (the device plugins' variables,
	// e.g. NVIDIA_VISIBLE_DEVICES).
	AnnotationEnv = "test.gpushare.io/env"
	// AnnotationDevices is JSON: container name -> kubelet's device IDs of
	// aliyun.com/gpu-mem for the container, sorted ("<UUID>::<k>", one per
	// unit).
	AnnotationDevices = "test.gpushare.io/devices"
	// LabelSimulated marks the nodes an agent registered.
	LabelSimulated = "test.gpushare.io/simulated"
)

// Defaults of Config.
const (
	DefaultHeartbeatPeriod = 10 * time.Second
	DefaultSyncPeriod      = 500 * time.Millisecond
	leaseDurationSeconds   = 40
)

// Config configures an agent.
type Config struct {
	// NodeName is the node to register and serve.
	NodeName string
	// Client talks to the API as the node (the demo and tests use the admin).
	Client kubernetes.Interface
	// KubeletDir holds device-plugins/ (kubelet.sock, the plugins' sockets,
	// the checkpoint) and pod-resources/kubelet.sock; absolute.
	KubeletDir string
	// Address is the node's InternalIP, e.g. 10.0.0.11.
	Address string
	// Capacity of cpu, memory and pods; missing ones get 32 CPUs, 128Gi
	// and 500 pods (above kubelet's 110, for bursts).
	Capacity corev1.ResourceList
	// Labels are added to the node's kubernetes.io/hostname, os and arch.
	Labels map[string]string
	// HeartbeatPeriod is how often the Lease and the Ready condition are
	// renewed (DefaultHeartbeatPeriod if 0).
	HeartbeatPeriod time.Duration
	// SyncPeriod is how often the node's gpu-mem capacity follows the
	// device manager (DefaultSyncPeriod if 0).
	SyncPeriod time.Duration
	// Restart, when it delivers, restarts the device manager, which
	// re-creates kubelet.sock (a kubelet restart).
	Restart <-chan struct{}
}

// Validate checks cfg and fills in defaults.
func (c *Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("a node name is required"))
	}
	if c.Client == nil {
		errs = append(errs, errors.New("an API client is required"))
	}
	if !filepath.IsAbs(c.KubeletDir) {
		errs = append(errs, fmt.Errorf("kubelet dir %q must be absolute", c.KubeletDir))
	}
	if c.HeartbeatPeriod <= 0 {
		c.HeartbeatPeriod = DefaultHeartbeatPeriod
	}
	if c.SyncPeriod <= 0 {
		c.SyncPeriod = DefaultSyncPeriod
	}
	defaults := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("128Gi"),
		corev1.ResourcePods:   resource.MustParse("500"),
	}
	if c.Capacity == nil {
		c.Capacity = corev1.ResourceList{}
	}
	for k, v := range defaults {
		if _, ok := c.Capacity[k]; !ok {
			c.Capacity[k] = v
		}
	}
	return errors.Join(errs...)
}

// PluginDir is where kubelet's device manager listens: KubeletDir/device-plugins.
func (c *Config) PluginDir() string { return filepath.Join(c.KubeletDir, "device-plugins") }

// PodResourcesSocket is KubeletDir/pod-resources/kubelet.sock.
func (c *Config) PodResourcesSocket() string {
	return filepath.Join(c.KubeletDir, "pod-resources", "kubelet.sock")
}

// agent is one running node agent.
type agent struct {
	cfg    Config
	client kubernetes.Interface
	host   *devicehost.Host
	pods   listerscorev1.PodLister
	queue  workqueue.TypedRateLimitingInterface[types.NamespacedName]
	// readySince is when the node was registered Ready (its condition's
	// lastTransitionTime).
	readySince metav1.Time

	mu sync.Mutex
	// admitted: pod UID -> what its admission produced, kept until the pod
	// is deleted, so a retried status write does not admit twice.
	admitted map[types.UID]*admission
}

// admission is the outcome of admitting one pod.
type admission struct {
	results   map[string]devicehost.Result // container name -> what it got; nil when rejected
	err       error                        // the admission error; nil when admitted
	annotated bool                         // AnnotationEnv/AnnotationDevices written
	reported  bool                         // status (and, when rejected, the event) written
}

// Run registers the node, starts kubelet's device manager and serves the
// node's pods until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("configuring the node agent: %w", err)
	}
	logger := klog.FromContext(ctx).WithValues("node", cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	a := &agent{cfg: cfg, client: cfg.Client, admitted: map[types.UID]*admission{}}
	if err := a.register(ctx); err != nil {
		return err
	}
	host, err := devicehost.Start(ctx, cfg.PluginDir(), devicehost.Options{PodResourcesSocket: cfg.PodResourcesSocket()})
	if err != nil {
		return fmt.Errorf("starting kubelet's device manager in %s: %w", cfg.PluginDir(), err)
	}
	defer host.Stop()
	a.host = host
	logger.Info("Node registered; kubelet's device manager is listening", "kubeletSocket", filepath.Join(cfg.PluginDir(), "kubelet.sock"))

	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}))
	podInformer := factory.Core().V1().Pods()
	a.pods = podInformer.Lister()
	a.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.NamespacedName](),
		workqueue.TypedRateLimitingQueueConfig[types.NamespacedName]{Name: "pods"})
	defer a.queue.ShutDown()
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			a.queue.Add(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		}
	}
	if _, err := podInformer.Informer().AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				a.release(p.UID)
			}
		},
	}); err != nil {
		return fmt.Errorf("registering the pod handler: %w", err)
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !toolscache.WaitForCacheSync(ctx.Done(), podInformer.Informer().HasSynced) {
		return fmt.Errorf("syncing the pods of node %s: %w", cfg.NodeName, ctx.Err())
	}

	var wg sync.WaitGroup
	for _, f := range []func(context.Context){a.heartbeat, a.syncCapacity, a.restarts, a.work} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	<-ctx.Done()
	a.queue.ShutDown()
	wg.Wait()
	return nil
}

// restarts restarts the device manager on every Config.Restart.
func (a *agent) restarts(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.cfg.Restart:
			if err := a.host.Restart(); err != nil {
				logger.Error(err, "Restarting kubelet's device manager")
				continue
			}
			logger.Info("Restarted kubelet's device manager: kubelet.sock re-created")
		}
	}
}

// work admits the queued pods. Each batch (what is queued when the worker
// wakes) is handled in creation order, as kubelet sorts the pods of one
// HandlePodAdditions call.
func (a *agent) work(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		first, shutdown := a.queue.Get()
		if shutdown {
			return
		}
		batch := []types.NamespacedName{first}
		for a.queue.Len() > 0 {
			k, shutdown := a.queue.Get()
			if shutdown {
				break
			}
			batch = append(batch, k)
		}
		created := func(k types.NamespacedName) time.Time {
			if p, err := a.pods.Pods(k.Namespace).Get(k.Name); err == nil {
				return p.CreationTimestamp.Time
			}
			return time.Time{}
		}
		sort.SliceStable(batch, func(i, j int) bool { return created(batch[i]).Before(created(batch[j])) })
		for _, k := range batch {
			if err := a.sync(ctx, k); err != nil {
				logger.Error(err, "Syncing a pod; retrying", "pod", k)
				a.queue.AddRateLimited(k)
			} else {
				a.queue.Forget(k)
			}
			a.queue.Done(k)
		}
	}
}

// sync brings one pod forward: admit a new pod, report it, or finish its
// deletion.
func (a *agent) sync(ctx context.Context, key types.NamespacedName) error {
	pod, err := a.pods.Pods(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return nil // the delete handler released it
	}
	if err != nil {
		return fmt.Errorf("reading pod %s from the cache: %w", key, err)
	}
	if pod.DeletionTimestamp != nil {
		// kubelet deletes the object with grace 0 once the containers have
		// stopped; ours stop at once.
		a.release(pod.UID)
		uid := pod.UID
		err := a.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &uid},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("removing terminated pod %s: %w", key, err)
		}
		return nil
	}
	a.mu.Lock()
	adm := a.admitted[pod.UID]
	a.mu.Unlock()
	if adm == nil {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			return nil
		}
		adm = a.admit(ctx, pod)
		a.mu.Lock()
		a.admitted[pod.UID] = adm
		a.mu.Unlock()
	}
	return a.report(ctx, pod, adm)
}

// admit runs the pod through kubelet's device manager.
func (a *agent) admit(ctx context.Context, pod *corev1.Pod) *admission {
	logger := klog.FromContext(ctx)
	results, err := a.host.Admit(pod)
	if err != nil {
		logger.Info("Pod rejected at admission", "pod", klog.KObj(pod), "err", err)
		return &admission{err: err}
	}
	logger.V(2).Info("Pod admitted", "pod", klog.KObj(pod))
	return &admission{results: results}
}

// report writes the admission's outcome: annotations and status Running,
// or status Failed with kubelet's reason and an event.
func (a *agent) report(ctx context.Context, pod *corev1.Pod, adm *admission) error {
	if adm.err == nil && !adm.annotated {
		env := map[string]map[string]string{}
		devs := map[string][]string{}
		for name, r := range adm.results {
			env[name] = r.Env
			if ids := r.Devices[string(gpushare.ResourceGPUMem)]; len(ids) > 0 {
				devs[name] = ids
			}
		}
		envJSON, err := json.Marshal(env)
		if err != nil {
			return fmt.Errorf("encoding the environment of pod %s: %w", klog.KObj(pod), err)
		}
		devsJSON, err := json.Marshal(devs)
		if err != nil {
			return fmt.Errorf("encoding the devices of pod %s: %w", klog.KObj(pod), err)
		}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
			AnnotationEnv: string(envJSON), AnnotationDevices: string(devsJSON),
		}}})
		if err != nil {
			return fmt.Errorf("encoding the annotation patch: %w", err)
		}
		if _, err := a.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("annotating pod %s with its environment: %w", klog.KObj(pod), err)
		}
		adm.annotated = true
	}
	if adm.reported {
		return nil
	}
	status := runningStatus(pod, a.cfg.Address)
	if adm.err != nil {
		status = rejectedStatus(pod, adm.err)
		if err := a.rejectEvent(ctx, pod, status.Message); err != nil {
			return err
		}
	}
	patch, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return fmt.Errorf("encoding the status of pod %s: %w", klog.KObj(pod), err)
	}
	if _, err := a.client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("writing the status of pod %s: %w", klog.KObj(pod), err)
	}
	adm.reported = true
	return nil
}

// release forgets the pod and drops it from the device manager's active
// pods; the manager frees its devices at its next allocation, as in kubelet.
func (a *agent) release(uid types.UID) {
	a.mu.Lock()
	delete(a.admitted, uid)
	a.mu.Unlock()
	if a.host != nil {
		a.host.Remove(uid)
	}
}

// rejectEvent records kubelet's admission-failure event on the pod.
func (a *agent) rejectEvent(ctx context.Context, pod *corev1.Pod, message string) error {
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: pod.Name + ".", Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
		},
		Reason: reasonAdmission, Message: message, Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "kubelet", Host: a.cfg.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := a.client.CoreV1().Events(pod.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("recording the admission failure of pod %s: %w", klog.KObj(pod), err)
	}
	return nil
}
