package deviceplugin

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
)

// TestManifests decodes manifests/deviceplugin and the Helm chart's
// renderings under manifests/rendered strictly and checks, for each, that
// the RBAC rules cover the API calls the plugin makes, that the DaemonSet's
// arguments parse with the plugin's own flags, and that it mounts what
// their --kubelet-dir expects.
func TestManifests(t *testing.T) {
	plain := []string{filepath.Join("..", "..", "manifests", "deviceplugin", "rbac.yaml"), filepath.Join("..", "..", "manifests", "deviceplugin", "daemonset.yaml")}
	rendered, err := filepath.Glob(filepath.Join("..", "..", "manifests", "rendered", "*.yaml"))
	if err != nil || len(rendered) == 0 {
		t.Fatalf("no rendered chart under manifests/rendered: %v", err)
	}
	sets := map[string][]string{"manifests/deviceplugin": plain}
	for _, f := range rendered {
		sets[filepath.Base(f)] = []string{f}
	}
	for name, files := range sets {
		t.Run(name, func(t *testing.T) { checkManifests(t, files) })
	}
}

func checkManifests(t *testing.T, files []string) {
	decode := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer().Decode
	var objs []runtime.Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			if commentsOnly(doc) {
				continue
			}
			obj, _, err := decode([]byte(doc), nil, nil)
			if runtime.IsNotRegisteredError(err) {
				continue // the chart's optional cert-manager and Prometheus kinds
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs = append(objs, obj)
		}
	}
	need := map[string][]string{ // resource -> verbs ClientAPI, the informer and the event recorder use
		"pods": {"list", "watch", "patch"}, "nodes": {"get", "patch"}, "nodes/status": {"patch"}, "events": {"create", "patch"},
	}
	var ds, mpsDS *appsv1.DaemonSet
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			if o.Name != "gpushare-device-plugin" {
				continue
			}
			for _, r := range o.Rules {
				for _, res := range r.Resources {
					need[res] = slices.DeleteFunc(need[res], func(v string) bool { return slices.Contains(r.Verbs, v) })
				}
			}
		case *appsv1.DaemonSet:
			switch o.Name {
			case "gpushare-device-plugin":
				ds = o
			case "gpushare-mps-daemons":
				mpsDS = o
			case "gpushare-dra-driver":
				// The DRA driver's: dra/pkg/driver TestManifests checks it.
			default:
				t.Errorf("unexpected DaemonSet %s", o.Name)
			}
		}
	}
	for res, verbs := range need {
		if len(verbs) > 0 {
			t.Errorf("ClusterRole lacks %v on %s", verbs, res)
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet")
	}
	c := ds.Spec.Template.Spec.Containers[0]
	var usage bytes.Buffer
	cfg, _, err := ParseFlags(c.Args, &usage)
	if err != nil {
		t.Fatalf("the DaemonSet's arguments %v: %v\n%s", c.Args, err, usage.String())
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Errorf("the DaemonSet does not set NODE_NAME from spec.nodeName (--node-name's default)")
	}
	mounts := map[string]bool{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = true
	}
	for _, p := range []string{cfg.PluginDir(), filepath.Dir(cfg.PodResourcesSocket())} {
		if !mounts[p] {
			t.Errorf("DaemonSet does not mount %s (--kubelet-dir=%s)", p, cfg.KubeletDir)
		}
	}
	checkMPSDaemons(t, cfg, mpsDS)
}

// checkMPSDaemons checks the MPS daemons' DaemonSet against the plugin's
// configuration: present exactly when the plugin leaves its daemons to it
// (--mps-daemons=external), its arguments parse with the mps-daemons
// command's flags, it serves the plugin's --mps-root and mounts it, and
// <mps-root>/shm at /dev/shm.
func checkMPSDaemons(t *testing.T, cfg Config, ds *appsv1.DaemonSet) {
	t.Helper()
	if (ds != nil) != (cfg.MPSDaemons == MPSDaemonsExternal) {
		t.Fatalf("the plugin's --mps-daemons is %q, and the MPS daemons' DaemonSet is present: %v", cfg.MPSDaemons, ds != nil)
	}
	if ds == nil {
		return
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != MPSDaemonsCommand {
		t.Fatalf("the MPS daemons' arguments %v do not start with %s", c.Args, MPSDaemonsCommand)
	}
	var usage bytes.Buffer
	mcfg, err := ParseMPSDaemonsFlags(c.Args[1:], &usage)
	if err != nil {
		t.Fatalf("the MPS daemons' arguments %v: %v\n%s", c.Args, err, usage.String())
	}
	if mcfg.Root != cfg.MPSRoot {
		t.Errorf("the MPS daemons serve %s, the plugin writes to --mps-root=%s", mcfg.Root, cfg.MPSRoot)
	}
	volumes := map[string]string{} // name -> host path
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			volumes[v.Name] = v.HostPath.Path
		}
	}
	mounted := map[string]string{} // container path -> host path
	for _, m := range c.VolumeMounts {
		mounted[m.MountPath] = volumes[m.Name]
	}
	want := map[string]string{cfg.MPSRoot: cfg.MPSRoot, "/dev/shm": filepath.Join(cfg.MPSRoot, "shm")}
	if diff := cmp.Diff(want, mounted); diff != "" {
		t.Errorf("the MPS daemons' mounts, container path -> host path (-want +got):\n%s", diff)
	}
}

// commentsOnly: a YAML document without an object (the rendered files'
// header).
func commentsOnly(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && l != "---" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}
