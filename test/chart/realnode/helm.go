package realnode

import (
	"context"
	"fmt"
	"maps"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"

	"github.com/gpushare/gpushare/test/chart"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/node"
)

// The topologies (the chart's topology value).
const (
	SecondScheduler = "second-scheduler"
	Extender        = "extender"
)

// ExtenderClusterIP is the extender Service's fixed ClusterIP in the
// extender topology: the operator's kube-scheduler runs on this machine,
// outside the cluster's DNS, so it calls the extender by address, as
// NOTES.txt tells such an operator to (extender.service.clusterIP).
const ExtenderClusterIP = "10.0.0.100"

// Values are the chart values of a real-node install of topology: images
// from `make images` (image.registry and the tags of node.BuildImages,
// pulled never: they are imported), and the device plugin on simulated
// cards (devicePlugin.fakeGPUs, which the chart documents for nodes
// without GPUs, with runtimeClassName "": no NVIDIA runtime here), whose
// idle taint starts at the node's two cards (devicePlugin.idleTaintMinCards;
// the default, 4, would never taint this node) so that the tests see the
// plugin write it through the node-scope admission policy. extra is merged
// over them, key by key at the top level.
func Values(topology string, extra map[string]any) map[string]any {
	v := map[string]any{
		"topology": topology,
		"image": map[string]any{
			"registry":     node.ImageRegistry,
			"pullPolicy":   "Never",
			"extender":     map[string]any{"tag": node.ImageTag},
			"devicePlugin": map[string]any{"tag": node.ImageTag},
			"draDriver":    map[string]any{"tag": node.ImageTag},
		},
		"devicePlugin": map[string]any{
			"fakeGPUs":          FakeGPUs,
			"runtimeClassName":  "",
			"idleTaintMinCards": fakeGPUCount,
		},
	}
	if topology == Extender {
		v["extender"] = map[string]any{"service": map[string]any{"clusterIP": ExtenderClusterIP}}
	}
	maps.Copy(v, extra)
	return v
}

// helmConfig is Helm's action configuration for the release namespace,
// talking to the control plane as its admin.
func (c *Cluster) helmConfig(logf func(string, ...any)) (*action.Configuration, error) {
	cfg := new(action.Configuration)
	getter := kube.GetConfig(c.CP.AdminKubeconfig(), "", Namespace)
	if err := cfg.Init(getter, Namespace, "secret", func(format string, v ...any) { logf(format, v...) }); err != nil {
		return nil, fmt.Errorf("initialising Helm: %w", err)
	}
	return cfg, nil
}

// Install runs `helm install gpushare manifests/charts/gpushare -n
// kube-system` with values, as docs/install.md does, and waits as
// `--wait --timeout` would (every Deployment, DaemonSet and Service ready
// by Helm's reading).
func (c *Cluster) Install(ctx context.Context, values map[string]any, timeout time.Duration, logf func(string, ...any)) (*release.Release, error) {
	ch, err := chart.Load()
	if err != nil {
		return nil, err
	}
	cfg, err := c.helmConfig(logf)
	if err != nil {
		return nil, err
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = ReleaseName, Namespace
	inst.Wait, inst.Timeout = true, timeout
	rel, err := inst.RunWithContext(ctx, ch, values)
	if err != nil {
		return rel, fmt.Errorf("helm install %s: %w", ReleaseName, err)
	}
	return rel, nil
}

// Uninstall runs `helm uninstall gpushare -n kube-system
// --cascade=foreground --wait`, as NOTES.txt says: it returns once the
// release's objects are gone, their pods too (foreground deletion), so no
// component writes anything afterwards.
func (c *Cluster) Uninstall(timeout time.Duration, logf func(string, ...any)) error {
	cfg, err := c.helmConfig(logf)
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.Wait, un.Timeout = true, timeout
	un.DeletionPropagation = "foreground"
	if _, err := un.Run(ReleaseName); err != nil {
		return fmt.Errorf("helm uninstall %s: %w", ReleaseName, err)
	}
	return nil
}

// SchedulerForExtender configures the control plane's kube-scheduler as
// NOTES.txt tells the operator of the extender topology to: the
// KubeSchedulerConfiguration from the ConfigMap
// kube-system/gpushare-kube-scheduler-config, with the client certificate
// and CA from the Secret gpushare-scheduler-client-tls written to files,
// and restarts it. Only the kubeconfig and the files' paths change (the
// scheduler runs on this machine, not on a kubeadm control-plane node).
func (c *Cluster) SchedulerForExtender(ctx context.Context) error {
	files, err := c.operatorFiles(ctx)
	if err != nil {
		return err
	}
	return c.CP.ReconfigureScheduler(ctx, framework.Options{
		SchedulerConfig: files.config,
		ExtenderURL:     files.urlPrefix,
		ExtenderTLS:     &framework.ExtenderTLS{CertFile: files.cert, KeyFile: files.key, CAFile: files.ca},
	})
}

// SchedulerWithoutExtender puts the control plane's kube-scheduler back
// to its configuration without extenders (after the extender topology).
func (c *Cluster) SchedulerWithoutExtender(ctx context.Context) error {
	return c.CP.ReconfigureScheduler(ctx, framework.Options{Scheduler: true})
}
