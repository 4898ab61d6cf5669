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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/isolation"
	"github.com/gpushare/gpushare/pkg/nodeagent"
)

// Plugin is the device plugin of one node. New builds it; Run serves it.
type Plugin struct {
	cfg Config // validated
	// logger names the node.
	logger klog.Logger
	gpus   GPUs
	cards  []Card
	// Built by New, never replaced.
	metrics   *Metrics
	api       ClientAPI
	nodes     nodeagent.ClientAPI
	recorder  record.EventRecorder
	enforcer  *isolation.Enforcer
	kubelet   *handoff.PodResources
	annotator *handoff.Annotator
	handoff   *handoff.Handoff
	factory   informers.SharedInformerFactory
	// pods is the informer of this node's pods.
	pods      toolscache.SharedIndexInformer
	server    *Server
	publisher *nodeagent.Publisher
	idle      *nodeagent.IdleTaint
	endpoint  *Endpoint
	// verifyNow, publishNow and taintNow wake the verifier, the publisher
	// and the idle taint; each holds at most one wake-up.
	verifyNow, publishNow, taintNow chan struct{}
	// closers release what New acquired; Close runs them last first.
	closers []func()
	closed  sync.Once
}

// New builds the device plugin from cfg. It validates cfg and discovers the
// cards. It refuses a unit whose ListAndWatch message would not fit
// kubelet's limit. It serves the metrics and chooses each card's memory
// isolation; an explicit mode the node cannot enforce is an error. It builds
// the handoff, the pod informer, the gRPC server and what publishes the
// node. What it starts, the metrics server, the event sink and mps mode's
// daemons, runs until ctx ends or Run returns. Close releases it without
// Run.
func New(ctx context.Context, cfg Config) (*Plugin, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Plugin{cfg: cfg, logger: klog.FromContext(ctx).WithValues("node", cfg.NodeName),
		verifyNow: make(chan struct{}, 1), publishNow: make(chan struct{}, 1), taintNow: make(chan struct{}, 1)}
	if err := p.build(klog.NewContext(ctx, p.logger)); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// build makes the plugin's parts in the order they depend on each other.
func (p *Plugin) build(ctx context.Context) error {
	devs, err := p.discover()
	if err != nil {
		return err
	}
	p.metrics = NewMetrics(p.cards)
	stopMetrics, err := p.metrics.Serve(ctx, p.cfg.MetricsListen)
	if err != nil {
		return err
	}
	p.closers = append(p.closers, stopMetrics)
	client := p.cfg.Client
	if client == nil {
		if client, err = NewClient(p.cfg.Kubeconfig, p.cfg.QPS, p.cfg.Burst); err != nil {
			return err
		}
	}
	p.api, p.nodes = ClientAPI{Client: client}, nodeagent.ClientAPI{Client: client}
	p.recordEvents(ctx, client)
	if err := p.setupIsolation(ctx, devs); err != nil {
		return err
	}
	p.kubelet = &handoff.PodResources{Socket: p.cfg.PodResourcesSocket()}
	p.annotator = handoff.NewAnnotator(p.metrics.PodAPI(p.api))
	p.handoff = handoff.New(handoff.Config{
		Node: p.cfg.NodeName, Unit: p.cfg.Unit, Cards: p.cards, Kubelet: p.kubelet,
		API: p.api, Notify: p.annotator.Enqueue, Recorder: eventRecorder{p.recorder},
	})
	if err := p.watchPods(client); err != nil {
		return err
	}
	p.server = NewServer(p.logger, p.metrics.Handoff(p.handoff), p.cards, p.cfg.Unit, p.cfg.DeviceListStrategy, func() { poke(p.verifyNow) })
	p.server.SetEnforcer(p.enforcer)
	p.publisher = &nodeagent.Publisher{API: p.nodes, Node: p.cfg.NodeName, Unit: p.cfg.Unit, Cards: p.cards, Driver: p.driver()}
	p.idle = &nodeagent.IdleTaint{API: p.nodes, Node: p.cfg.NodeName, Cards: len(p.cards), MinCards: p.cfg.IdleTaintMinCards, Pods: p.nodePods}
	p.endpoint = &Endpoint{Dir: p.cfg.PluginDir(), Server: p.server, Restart: p.cfg.Restart}
	return nil
}

// discover opens the GPUs and reads their cards in the node's unit.
func (p *Plugin) discover() ([]gpu.Device, error) {
	gpus, closeGPUs, err := openGPUs(p.cfg)
	if err != nil {
		return nil, err
	}
	p.gpus = gpus
	p.closers = append(p.closers, closeGPUs)
	devs, err := gpus.Devices()
	if err != nil {
		return nil, fmt.Errorf("discovering GPUs: %w", err)
	}
	if p.cards, err = CardsOf(p.cfg.NodeName, devs, p.cfg.Unit); err != nil {
		return nil, err
	}
	if err := CheckMessageSize(p.cfg.NodeName, devs, p.cfg.Unit); err != nil {
		return nil, err
	}
	for _, c := range p.cards {
		p.logger.Info("GPU", "index", c.Index, "uuid", c.UUID, "model", c.Model, "memory", c.Units, "unit", p.cfg.Unit)
	}
	return devs, nil
}

// recordEvents sends the plugin's events to the API server.
func (p *Plugin) recordEvents(ctx context.Context, client kubernetes.Interface) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	p.closers = append(p.closers, broadcaster.Shutdown)
	p.recorder = broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "gpushare-device-plugin", Host: p.cfg.NodeName})
}

// setupIsolation gives each card its mode (setupIsolation) and reports an
// MPS daemon's restart on the Node.
func (p *Plugin) setupIsolation(ctx context.Context, devs []gpu.Device) error {
	nodeRef := &corev1.ObjectReference{Kind: "Node", Name: p.cfg.NodeName, UID: types.UID(p.cfg.NodeName)}
	enforcer, stop, err := setupIsolation(ctx, &p.cfg, p.gpus, devs, p.cards, p.metrics, runtimeCDI(ctx, &p.cfg, p.api), func(eventType, reason, msg string) {
		p.recorder.Event(nodeRef, eventType, reason, msg)
	})
	if err != nil {
		return err
	}
	p.enforcer = enforcer
	p.closers = append(p.closers, stop)
	return nil
}

// watchPods builds the informer of the node's pods, which feeds the
// handoff and wakes the idle taint.
func (p *Plugin) watchPods(client kubernetes.Interface) error {
	p.factory = informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", p.cfg.NodeName).String()
		}),
		informers.WithTransform(func(obj any) (any, error) {
			if m, ok := obj.(metav1.Object); ok {
				m.SetManagedFields(nil)
			}
			return obj, nil
		}))
	p.pods = p.factory.Core().V1().Pods().Informer()
	if _, err := p.pods.AddEventHandler(p.handoff.PodHandler()); err != nil {
		return fmt.Errorf("registering the pod handler: %w", err)
	}
	// Every pod event may change whether the node is idle.
	pokeTaint := func() { poke(p.taintNow) }
	if _, err := p.pods.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { pokeTaint() }, UpdateFunc: func(any, any) { pokeTaint() }, DeleteFunc: func(any) { pokeTaint() },
	}); err != nil {
		return fmt.Errorf("registering the idle-taint handler: %w", err)
	}
	return nil
}

// nodePods returns the pods the informer holds (those bound to the node).
func (p *Plugin) nodePods() []*corev1.Pod {
	var pods []*corev1.Pod
	for _, obj := range p.pods.GetStore().List() {
		if pod, ok := obj.(*corev1.Pod); ok {
			pods = append(pods, pod)
		}
	}
	return pods
}

// driver returns what the node's driver states, nil when it states none
// or cannot be read (logged).
func (p *Plugin) driver() *gpu.Driver {
	drv, err := p.gpus.Driver()
	if err == nil {
		return &drv
	}
	if !errors.Is(err, gpu.ErrNoDriver) {
		p.logger.Error(err, "Reading the driver's version: the node's driver and CUDA labels are left out")
	}
	return nil
}

// Run serves the plugin until ctx ends, then releases what New acquired. It
// starts the pod informer and waits for it. CheckUnitChange refuses a unit
// other than the one the node was published in while kubelet lists devices
// held. Run takes in the previous device plugin's pods and starts the loops.
// It serves and registers the plugin with kubelet, again after kubelet
// restarts. Call it once.
func (p *Plugin) Run(ctx context.Context) error {
	defer p.Close()
	ctx = klog.NewContext(ctx, p.logger)
	// The informers stop when Run returns, also on an early error.
	ctx, stopInformers := context.WithCancel(ctx)
	p.factory.Start(ctx.Done())
	defer p.factory.Shutdown()
	defer stopInformers()
	adoption, err := p.start(ctx)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.startLoops(ctx, &wg, adoption)
	if p.cfg.OnReady != nil {
		p.cfg.OnReady(p.handoff)
	}
	return p.endpoint.Run(ctx)
}

// start brings the handoff up to the node before the first registration,
// and returns what it advertises for the previous plugin's pods.
func (p *Plugin) start(ctx context.Context) (handoff.Adoption, error) {
	if !toolscache.WaitForCacheSync(ctx.Done(), p.pods.HasSynced) {
		return handoff.Adoption{}, fmt.Errorf("syncing the pods of node %s: %w", p.cfg.NodeName, ctx.Err())
	}
	if err := CheckUnitChange(ctx, p.api, p.kubelet, p.cfg.NodeName, p.cfg.Unit); err != nil {
		return handoff.Adoption{}, err
	}
	// Devices kubelet holds for pods of the previous device plugin,
	// Aliyun's, are known before the first registration (legacy.go).
	if err := p.handoff.AdoptAtStart(ctx); err != nil {
		return handoff.Adoption{}, err
	}
	// The grants restored from the pods' annotations are the shares mps
	// cards serve. Daemons that ran in this process's predecessor come back
	// with the largest share's limit before kubelet restarts a container on
	// them.
	retainMPS(ctx, p.handoff.HeldShares(), p.enforcer, p.cfg.Unit, retainMinAge)
	adoption := p.handoff.Adoption()
	p.server.SetAdopted(adoption.ByCard)
	logAdoption(p.logger, p.cards, nil, adoption)
	return adoption, nil
}

// startLoops starts every goroutine of the plugin; each stops when ctx
// ends and marks wg done.
func (p *Plugin) startLoops(ctx context.Context, wg *sync.WaitGroup, adoption handoff.Adoption) {
	goRun := func(f func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f()
		}()
	}
	goRun(func() { p.annotator.Run(ctx, p.handoff) })
	goRun(func() {
		p.handoff.RunVerifier(ctx, p.cfg.VerifyPeriod, p.verifyNow, func(ctx context.Context) {
			retainIsolation(ctx, p.handoff, p.enforcer, p.cfg.Unit, retainMinAge)
		})
	})
	goRun(func() { p.publisher.Run(ctx, p.publishNow) })
	goRun(func() { p.idle.Run(ctx, p.taintNow) })
	goRun(func() { adoptLoop(ctx, p.handoff, p.server, p.cards, adoption) })
	if p.cfg.HealthCheck {
		var uuids []string
		for _, c := range p.cards {
			uuids = append(uuids, c.UUID)
		}
		health := gpu.NewHealth(uuids, p.cfg.RecoveryWindow, nil)
		apply := func() {
			unhealthy := health.Unhealthy()
			p.server.SetHealth(unhealthy)
			p.publisher.SetHealth(unhealthy)
			p.metrics.SetHealth(unhealthy)
			poke(p.publishNow)
		}
		goRun(func() { health.Watch(ctx, p.metrics.GPUs(p.gpus), apply) })
	} else {
		p.logger.Info("Health checks disabled (--health-check=false): every card is reported healthy")
	}
	if f, ok := p.gpus.(*gpu.Fake); ok && p.cfg.FakeControl != "" {
		p.logger.Info("Following the fake-GPU control file (test-only)", "path", p.cfg.FakeControl)
		goRun(func() { f.FollowControl(ctx, p.cfg.FakeControl, fakeControlPeriod) })
	}
}

// Close releases what New acquired: mps mode's daemons, the event sink,
// the metrics server and the GPUs. Run calls it on its way out; later
// calls do nothing.
func (p *Plugin) Close() {
	p.closed.Do(func() {
		for i := len(p.closers) - 1; i >= 0; i-- {
			p.closers[i]()
		}
	})
}

// poke wakes the loop that reads ch, unless a wake-up waits already.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// openGPUs returns the configured GPUs and a function that releases them.
func openGPUs(cfg Config) (GPUs, func(), error) {
	if cfg.GPUs != nil {
		return cfg.GPUs, func() {}, nil
	}
	return gpu.Open(cfg.FakeGPUs, cfg.FakeDriver, cfg.NodeName)
}
