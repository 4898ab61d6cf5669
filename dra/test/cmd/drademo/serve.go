package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/dra/pkg/driver"
	"github.com/gpushare/gpushare/dra/test/kubeletclient"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/supervisor"
	"github.com/gpushare/gpushare/test/util"
)

// Files and directories of the state directory.
const (
	supervisorPIDFile = "dra-demo.pid" // "PID EXE" of the supervisor (supervisor.Files)
	processesFile     = "processes"    // "PID EXE NAME" per control-plane process
	readyFile         = "ready"        // the admin kubeconfig path, once up
	failedFile        = "failed"       // why the supervisor gave up
	preparedFile      = "prepared"     // the claims the node prepared (JSON, preparedClaim by claim UID)
	clusterDir        = "cluster"      // the control plane's directory
	nodeDir           = "node"         // the driver's kubelet and CDI directories
	supervisorLog     = "dra-demo.log" // the supervisor's progress
)

// nodeName is the demo's one DRA node.
const nodeName = "dra-node"

// syncPeriod is how often the supervisor, as the node's kubelet, prepares
// newly allocated claims and unprepares those of pods gone.
const syncPeriod = time.Second

func (o options) path(name string) string { return filepath.Join(o.dir, name) }

// files are the supervisor's files.
func (o options) files() supervisor.Files {
	return supervisor.Files{Dir: o.dir, PID: supervisorPIDFile, Ready: readyFile, Failed: failedFile, Log: supervisorLog}
}

// kubeletDir and cdiDir are the driver's directories.
func (o options) kubeletDir() string { return filepath.Join(o.dir, nodeDir, "kubelet") }
func (o options) cdiDir() string     { return filepath.Join(o.dir, nodeDir, "cdi") }

// preparedClaim is a claim the node prepared, for the report.
type preparedClaim struct {
	Namespace, Name string
	// CDIDevices are the CDI device IDs the driver answered.
	CDIDevices []string
}

// serve is the supervisor: it starts the control plane and the node's
// driver, writes the PID and ready files, plays kubelet for the claims
// until SIGTERM, then stops everything.
func serve(ctx context.Context, o options) error {
	logf := func(format string, args ...any) {
		fmt.Printf("%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	cp, err := framework.Start(ctx, framework.Options{
		KubernetesVersion: framework.KubernetesVersion,
		Scheduler:         true,
		Controllers:       []string{"resourceclaim-controller"},
		Dir:               o.path(clusterDir),
	})
	if err != nil {
		return o.files().GiveUp(fmt.Errorf("starting the Kubernetes %s control plane: %w", framework.KubernetesVersion, err))
	}
	defer cp.Stop()
	logf("control plane %s up: %s", framework.KubernetesVersion, cp.APIServerURL())
	admin := cp.Client(framework.AdminUser)
	if _, err := admin.ResourceV1().DeviceClasses().Create(ctx, devices.DeviceClass(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return o.files().GiveUp(fmt.Errorf("creating the DeviceClass: %w", err))
	}
	node := util.MakeNode(nodeName).Obj()
	node.Labels = map[string]string{"gpushare.io/device-mode": "dra"}
	if err := framework.CreateNode(ctx, admin, node); err != nil {
		return o.files().GiveUp(fmt.Errorf("creating node %s: %w", nodeName, err))
	}
	for _, d := range []string{o.kubeletDir(), o.cdiDir()} {
		if err := os.MkdirAll(d, 0o755); err != nil { //nolint:gosec // kubelet's and CDI's directories, read by the runtime as on a node
			return o.files().GiveUp(err)
		}
	}

	driverCtx, stopDriver := context.WithCancel(ctx)
	ready := make(chan struct{})
	driverDone := make(chan error, 1)
	go func() {
		driverDone <- driver.Run(driverCtx, driver.Config{
			NodeName: nodeName, FakeGPUs: o.gpus, FakeDriver: "615.00", Isolation: "auto",
			KubeletDir: o.kubeletDir(), CDIDir: o.cdiDir(), CDIHook: "/usr/bin/nvidia-cdi-hook",
			HealthCheck: true, Client: admin, RegistrationDisabled: true,
			OnReady: func(*driver.Driver) { close(ready) },
		})
	}()
	var stopOnce sync.Once
	stop := func() {
		stopOnce.Do(func() {
			stopDriver()
			if err := <-driverDone; err != nil {
				logf("the DRA driver ended: %v", err)
			}
		})
	}
	select {
	case <-ready:
	case err := <-driverDone:
		stopDriver()
		return o.files().GiveUp(fmt.Errorf("the DRA driver ended at start: %w", err))
	case <-time.After(time.Minute):
		stop()
		return o.files().GiveUp(errors.New("the DRA driver did not start within a minute"))
	}
	defer stop()
	logf("DRA driver serving node %s (%s, driver isolation, as a node whose NVIDIA driver is 615.00)", nodeName, o.gpus)

	var lines strings.Builder
	pids := cp.PIDs()
	for _, name := range slices.Sorted(maps.Keys(pids)) {
		if argv, err := supervisor.Cmdline(pids[name]); err == nil {
			fmt.Fprintf(&lines, "%d %s %s\n", pids[name], argv[0], name)
		}
	}
	if err := supervisor.WriteAtomic(o.path(processesFile), lines.String()); err != nil {
		return o.files().GiveUp(err)
	}
	k := &kubelet{api: admin, client: kubeletclient.Client{Socket: filepath.Join(o.kubeletDir(), "plugins", devices.DriverName, "dra.sock")}, file: o.path(preparedFile), prepared: map[types.UID]preparedClaim{}}
	if err := k.write(); err != nil {
		return o.files().GiveUp(err)
	}
	if err := supervisor.WriteAtomic(o.path(readyFile), cp.AdminKubeconfig()+"\n"); err != nil {
		return o.files().GiveUp(err)
	}
	logf("ready; playing node %s's kubelet for its claims every %s", nodeName, syncPeriod)

	reported := map[string]bool{}
	t := time.NewTicker(syncPeriod)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// Stopped before the files go: down waits for the PID file.
			logf("stopping every process of the demo")
			stop()
			cp.Stop()
			logf("stopped")
			for _, f := range []string{processesFile, readyFile, supervisorPIDFile} {
				_ = os.Remove(o.path(f))
			}
			return nil
		case <-t.C:
			if err := k.sync(ctx); err != nil && !reported[err.Error()] {
				reported[err.Error()] = true
				logf("kubelet's part: %v", err)
			}
			for _, err := range cp.Exited() {
				if !reported[err.Error()] {
					reported[err.Error()] = true
					logf("a demo process ended unexpectedly: %v", err)
				}
			}
		}
	}
}

// kubelet plays the node's kubelet for DRA: it prepares the claims
// allocated to the node's pods and unprepares those of pods gone, over the
// driver's socket, as kubelet's DRA manager does.
type kubelet struct {
	api      kubernetes.Interface
	client   kubeletclient.Client
	file     string
	prepared map[types.UID]preparedClaim
}

// sync brings the prepared claims in line with the node's pods.
func (k *kubelet) sync(ctx context.Context) error {
	pods, err := k.api.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + nodeName})
	if err != nil {
		return fmt.Errorf("listing the node's pods: %w", err)
	}
	want := map[types.UID]*resourceapi.ResourceClaim{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.ResourceClaimName == nil {
				continue
			}
			c, err := k.api.ResourceV1().ResourceClaims(p.Namespace).Get(ctx, *s.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				continue // deleted with its pod, or not made yet
			}
			if c.Status.Allocation != nil && slices.ContainsFunc(c.Status.ReservedFor, func(r resourceapi.ResourceClaimConsumerReference) bool { return r.UID == p.UID }) {
				want[c.UID] = c
			}
		}
	}
	var prep, unprep []kubeletclient.Claim
	for uid, c := range want {
		if _, ok := k.prepared[uid]; !ok {
			prep = append(prep, kubeletclient.ClaimOf(c))
		}
	}
	for uid, c := range k.prepared {
		if _, ok := want[uid]; !ok {
			unprep = append(unprep, kubeletclient.Claim{Namespace: c.Namespace, Name: c.Name, UID: uid})
		}
	}
	if len(prep) == 0 && len(unprep) == 0 {
		return nil
	}
	var errs []error
	if len(prep) > 0 {
		ids, err := k.client.Prepare(ctx, prep...)
		for _, c := range prep {
			if d, ok := ids[c.UID]; ok {
				k.prepared[c.UID] = preparedClaim{Namespace: c.Namespace, Name: c.Name, CDIDevices: d}
			}
		}
		errs = append(errs, err)
	}
	if len(unprep) > 0 {
		done, err := k.client.Unprepare(ctx, unprep...)
		for _, uid := range done {
			delete(k.prepared, uid)
		}
		errs = append(errs, err)
	}
	return errors.Join(append(errs, k.write())...)
}

// write records the prepared claims for the report.
func (k *kubelet) write() error {
	b, err := json.MarshalIndent(k.prepared, "", "  ")
	if err != nil {
		return err
	}
	return supervisor.WriteAtomic(k.file, string(b)+"\n")
}

// readPrepared reads the supervisor's record of the prepared claims.
func readPrepared(path string) (map[types.UID]preparedClaim, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	out := map[types.UID]preparedClaim{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return out, nil
}

// podClaim is the name of the claim pod's entry "gpu" got, "" before
// kube-controller-manager made it.
func podClaim(pod *corev1.Pod) string {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	return ""
}
