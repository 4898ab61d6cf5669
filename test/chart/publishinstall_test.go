package chart

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/cli"
	"helm.sh/helm/v3/pkg/kube"
	helmregistry "helm.sh/helm/v3/pkg/registry"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/build/publish"
	"github.com/gpushare/gpushare/test/integration/framework"
)

// TestPublishedChartInstallUpgradeUninstall publishes two versions of the
// real chart into a registry on loopback, as make publish does, then on a
// real kube-apiserver runs what a user runs: `helm install gpushare
// oci://REGISTRY/charts/gpushare --version 0.4.0`, `helm upgrade` to
// 0.4.1 and `helm uninstall`, through Helm's registry client and actions.
// Each step's DaemonSet pulls the device plugin from that registry at its
// version; the install's notes warn that the cluster has no RuntimeClass
// nvidia (this cluster has none); after the uninstall no object of the
// release is left. The control plane runs no nodes, so no image is pulled
// here: test/chart/realnode pulls images on a real node.
func TestPublishedChartInstallUpgradeUninstall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(s.Close)
	reg := strings.TrimPrefix(s.URL, "http://") + "/gpushare"
	for _, v := range []string{"v0.4.0", "v0.4.1"} {
		pkg, err := Package(v, reg, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := publish.PushChart(reg, pkg); err != nil {
			t.Fatal(err)
		}
	}

	cp := framework.StartT(t, framework.Options{})
	home := t.TempDir()
	t.Setenv("HELM_CACHE_HOME", filepath.Join(home, "cache"))
	t.Setenv("HELM_CONFIG_HOME", filepath.Join(home, "config"))
	t.Setenv("HELM_DATA_HOME", filepath.Join(home, "data"))
	settings := cli.New()
	rc, err := helmregistry.NewClient(helmregistry.ClientOptPlainHTTP(), helmregistry.ClientOptWriter(io.Discard),
		helmregistry.ClientOptCredentialsFile(filepath.Join(home, "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	cfg := new(action.Configuration)
	getter := kube.GetConfig(cp.AdminKubeconfig(), "", Release.Namespace)
	if err := cfg.Init(getter, Release.Namespace, "secret", t.Logf); err != nil {
		t.Fatal(err)
	}
	cfg.RegistryClient = rc
	admin := kubernetes.NewForConfigOrDie(cp.RESTConfig(framework.AdminUser))

	// locate downloads the published chart at version as helm does.
	locate := func(opts *action.ChartPathOptions, version string) string {
		t.Helper()
		opts.Version, opts.PlainHTTP = version, true
		p, err := opts.LocateChart(publish.ChartURL(reg), settings)
		if err != nil {
			t.Fatalf("helm locating %s --version %s: %v", publish.ChartURL(reg), version, err)
		}
		return p
	}
	// pluginImage is the device plugin DaemonSet's image.
	pluginImage := func() string {
		t.Helper()
		ds, err := admin.AppsV1().DaemonSets(Release.Namespace).Get(ctx, "gpushare-device-plugin", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ds.Spec.Template.Spec.Containers[0].Image
	}

	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace = Release.Name, Release.Namespace
	install.SetRegistryClient(rc)
	ch, err := loader.Load(locate(&install.ChartPathOptions, "0.4.0"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := install.RunWithContext(ctx, ch, nil)
	if err != nil {
		t.Fatalf("helm install oci://…/charts/gpushare --version 0.4.0: %v", err)
	}
	if want := reg + "/gpushare-device-plugin:v0.4.0"; pluginImage() != want {
		t.Errorf("after the install the device plugin's image is %s, want %s", pluginImage(), want)
	}
	if !strings.Contains(rel.Info.Notes, `WARNING: this cluster has no RuntimeClass "nvidia"`) {
		t.Errorf("the install's notes do not warn of the missing RuntimeClass:\n%s", rel.Info.Notes)
	}

	upgrade := action.NewUpgrade(cfg)
	upgrade.Namespace = Release.Namespace
	upgrade.SetRegistryClient(rc)
	ch, err = loader.Load(locate(&upgrade.ChartPathOptions, "0.4.1"))
	if err != nil {
		t.Fatal(err)
	}
	if rel, err = upgrade.RunWithContext(ctx, Release.Name, ch, nil); err != nil {
		t.Fatalf("helm upgrade to 0.4.1: %v", err)
	}
	if rel.Version != 2 || rel.Chart.Metadata.Version != "0.4.1" {
		t.Errorf("after the upgrade: revision %d of chart %s, want revision 2 of 0.4.1", rel.Version, rel.Chart.Metadata.Version)
	}
	if want := reg + "/gpushare-device-plugin:v0.4.1"; pluginImage() != want {
		t.Errorf("after the upgrade the device plugin's image is %s, want %s", pluginImage(), want)
	}

	// The sweep sees the release while it is installed.
	if before := releaseObjects(ctx, t, cp); len(before) < 20 {
		t.Fatalf("the installed release shows %d objects to the sweep, want its DaemonSet, Deployment, RBAC, …:\n  %s", len(before), strings.Join(before, "\n  "))
	}
	if _, err := action.NewUninstall(cfg).Run(Release.Name); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	if left := releaseObjects(ctx, t, cp); len(left) > 0 {
		t.Errorf("helm uninstall left %d objects of the release:\n  %s", len(left), strings.Join(left, "\n  "))
	}
}

// skipKinds are left out of the sweep: events expire on their own, the
// others are deprecated mirrors (EndpointSlices are swept).
var skipKinds = map[string]bool{"Event": true, "ComponentStatus": true, "Endpoints": true}

// releaseObjects lists, across every listable resource of the API, the
// objects labelled as the release's (app.kubernetes.io/instance) and
// Helm's records of it (owner=helm).
func releaseObjects(ctx context.Context, t *testing.T, cp *framework.ControlPlane) []string {
	t.Helper()
	cfg := cp.RESTConfig(framework.AdminUser)
	lists, err := discovery.NewDiscoveryClientForConfigOrDie(cfg).ServerPreferredResources()
	if err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	var left []string
	n := 0
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !strings.Contains(strings.Join(r.Verbs, ","), "list") || skipKinds[r.Kind] {
				continue
			}
			n++
			for _, selector := range []string{"app.kubernetes.io/instance=" + Release.Name, "owner=helm,name=" + Release.Name} {
				objs, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{LabelSelector: selector})
				if err != nil {
					t.Fatalf("listing %s: %v", r.Name, err)
				}
				for _, o := range objs.Items {
					left = append(left, r.Kind+" "+o.GetNamespace()+"/"+o.GetName())
				}
			}
		}
	}
	if n < 30 {
		t.Fatalf("listed %d resources; discovery is broken", n)
	}
	return left
}
