package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/nodeagent"
)

// Run serves the device plugin until ctx ends: it discovers the cards,
// chooses each card's memory isolation (--isolation; an explicit mode the
// node cannot enforce is an error),
// refuses a unit whose ListAndWatch message would not fit kubelet's limit,
// or that differs from the unit the node was published in while kubelet
// lists devices held (CheckUnitChange), publishes the node inventory, watches this node's pods, serves and
// registers the plugin (again after kubelet restarts), watches card health
// and verifies kubelet's allocations against the pod annotations.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	logger := klog.FromContext(ctx).WithValues("node", cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)

	gpus, closeGPUs, err := openGPUs(cfg)
	if err != nil {
		return err
	}
	defer closeGPUs()
	devs, err := gpus.Devices()
	if err != nil {
		return fmt.Errorf("discovering GPUs: %w", err)
	}
	cards, err := CardsOf(cfg.NodeName, devs, cfg.Unit)
	if err != nil {
		return err
	}
	if err := CheckMessageSize(cfg.NodeName, devs, cfg.Unit); err != nil {
		return err
	}
	for _, c := range cards {
		logger.Info("GPU", "index", c.Index, "uuid", c.UUID, "model", c.Model, "memory", c.Units, "unit", cfg.Unit)
	}
	metrics := NewMetrics(cards)
	stopMetrics, err := metrics.Serve(ctx, cfg.MetricsListen)
	if err != nil {
		return err
	}
	defer stopMetrics()

	client := cfg.Client
	if client == nil {
		if client, err = NewClient(cfg.Kubeconfig, cfg.QPS, cfg.Burst); err != nil {
			return err
		}
	}
	api := ClientAPI{Client: client}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "gpushare-device-plugin", Host: cfg.NodeName})
	nodeRef := &corev1.ObjectReference{Kind: "Node", Name: cfg.NodeName, UID: types.UID(cfg.NodeName)}
	enforcer, stopIsolation, err := setupIsolation(ctx, &cfg, gpus, devs, cards, metrics, runtimeCDI(ctx, &cfg, api), func(eventType, reason, msg string) {
		recorder.Event(nodeRef, eventType, reason, msg)
	})
	if err != nil {
		return err
	}
	defer stopIsolation()

	kubelet := &handoff.PodResources{Socket: cfg.PodResourcesSocket()}
	ann := handoff.NewAnnotator(metrics.PodAPI(api))
	h := handoff.New(handoff.Config{
		Node: cfg.NodeName, Unit: cfg.Unit, Cards: cards, Kubelet: kubelet,
		API: api, Notify: ann.Enqueue, Recorder: eventRecorder{recorder},
	})

	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", cfg.NodeName).String()
		}),
		informers.WithTransform(func(obj any) (any, error) {
			if m, ok := obj.(metav1.Object); ok {
				m.SetManagedFields(nil)
			}
			return obj, nil
		}))
	podInformer := factory.Core().V1().Pods().Informer()
	if _, err := podInformer.AddEventHandler(h.PodHandler()); err != nil {
		return fmt.Errorf("registering the pod handler: %w", err)
	}
	// Every pod event may change whether the node is idle.
	taintNow := make(chan struct{}, 1)
	pokeTaint := func() {
		select {
		case taintNow <- struct{}{}:
		default:
		}
	}
	if _, err := podInformer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { pokeTaint() }, UpdateFunc: func(any, any) { pokeTaint() }, DeleteFunc: func(any) { pokeTaint() },
	}); err != nil {
		return fmt.Errorf("registering the idle-taint handler: %w", err)
	}
	// The informers stop when Run returns, also on an early error.
	ctx, stopInformers := context.WithCancel(ctx)
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	defer stopInformers()
	if !toolscache.WaitForCacheSync(ctx.Done(), podInformer.HasSynced) {
		return fmt.Errorf("syncing the pods of node %s: %w", cfg.NodeName, ctx.Err())
	}
	if err := CheckUnitChange(ctx, api, kubelet, cfg.NodeName, cfg.Unit); err != nil {
		return err
	}
	// Devices kubelet holds for pods of the previous device plugin
	// (Aliyun's) are known before the first registration (legacy.go).
	if err := h.AdoptAtStart(ctx); err != nil {
		return err
	}
	// The grants restored from the pods' annotations are the shares mps
	// cards serve: their daemons come back (when they ran in this
	// process's predecessor) with the largest share's limit before
	// kubelet restarts a container on them.
	retainMPS(ctx, h.HeldShares(), enforcer, cfg.Unit, retainMinAge)

	verifyNow := make(chan struct{}, 1)
	publishNow := make(chan struct{}, 1)
	poke := func(ch chan struct{}) {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	server := NewServer(logger, metrics.Handoff(h), cards, cfg.Unit, cfg.DeviceListStrategy, func() { poke(verifyNow) })
	server.SetEnforcer(enforcer)
	adoption := h.Adoption()
	server.SetAdopted(adoption.ByCard)
	logAdoption(logger, cards, nil, adoption)
	nodes := nodeagent.ClientAPI{Client: client}
	pub := &nodeagent.Publisher{API: nodes, Node: cfg.NodeName, Unit: cfg.Unit, Cards: cards}
	if drv, err := gpus.Driver(); err == nil {
		pub.Driver = &drv
	} else if !errors.Is(err, gpu.ErrNoDriver) {
		logger.Error(err, "Reading the driver's version: the node's driver and CUDA labels are left out")
	}

	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	goRun := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	goRun(func() { ann.Run(ctx, h) })
	goRun(func() {
		h.RunVerifier(ctx, cfg.VerifyPeriod, verifyNow, func(ctx context.Context) {
			retainIsolation(ctx, h, enforcer, cfg.Unit, retainMinAge)
		})
	})
	goRun(func() { pub.Run(ctx, publishNow) })
	idle := &nodeagent.IdleTaint{API: nodes, Node: cfg.NodeName, Cards: len(cards), MinCards: cfg.IdleTaintMinCards, Pods: func() []*corev1.Pod {
		var pods []*corev1.Pod
		for _, obj := range podInformer.GetStore().List() {
			if p, ok := obj.(*corev1.Pod); ok {
				pods = append(pods, p)
			}
		}
		return pods
	}}
	goRun(func() { idle.Run(ctx, taintNow) })
	goRun(func() { adoptLoop(ctx, h, server, cards, adoption) })
	if cfg.HealthCheck {
		var uuids []string
		for _, c := range cards {
			uuids = append(uuids, c.UUID)
		}
		health := gpu.NewHealth(uuids, cfg.RecoveryWindow, nil)
		apply := func() {
			unhealthy := health.Unhealthy()
			server.SetHealth(unhealthy)
			pub.SetHealth(unhealthy)
			metrics.SetHealth(unhealthy)
			poke(publishNow)
		}
		goRun(func() { health.Watch(ctx, metrics.GPUs(gpus), apply) })
	} else {
		logger.Info("Health checks disabled (--health-check=false): every card is reported healthy")
	}
	if f, ok := gpus.(*gpu.Fake); ok && cfg.FakeControl != "" {
		logger.Info("Following the fake-GPU control file (test-only)", "path", cfg.FakeControl)
		goRun(func() { f.FollowControl(ctx, cfg.FakeControl, fakeControlPeriod) })
	}
	if cfg.OnReady != nil {
		cfg.OnReady(h)
	}
	ep := &Endpoint{Dir: cfg.PluginDir(), Server: server, Restart: cfg.Restart}
	return ep.Run(ctx)
}

// openGPUs returns the configured GPUs and a function that releases them.
func openGPUs(cfg Config) (GPUs, func(), error) {
	if cfg.GPUs != nil {
		return cfg.GPUs, func() {}, nil
	}
	return gpu.Open(cfg.FakeGPUs, cfg.FakeDriver, cfg.NodeName)
}
