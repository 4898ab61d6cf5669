package deviceplugin

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
)

// TestManifests decodes manifests/deviceplugin strictly and checks that
// the RBAC rules cover the API calls the plugin makes and that the
// DaemonSet mounts what --kubelet-dir expects.
func TestManifests(t *testing.T) {
	decode := serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer().Decode
	var objs []runtime.Object
	for _, f := range []string{"rbac.yaml", "daemonset.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "manifests", "deviceplugin", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			obj, _, err := decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			objs = append(objs, obj)
		}
	}
	need := map[string][]string{ // resource -> verbs ClientAPI, the informer and the event recorder use
		"pods": {"get", "list", "watch", "patch"}, "nodes": {"get", "patch"}, "nodes/status": {"patch"}, "events": {"create", "patch"},
	}
	var ds *appsv1.DaemonSet
	for _, o := range objs {
		switch o := o.(type) {
		case *rbacv1.ClusterRole:
			for _, r := range o.Rules {
				for _, res := range r.Resources {
					need[res] = slices.DeleteFunc(need[res], func(v string) bool { return slices.Contains(r.Verbs, v) })
				}
			}
		case *appsv1.DaemonSet:
			ds = o
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
	mounts := map[string]bool{}
	for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounts[m.MountPath] = true
	}
	cfg := Config{KubeletDir: DefaultKubeletDir}
	for _, p := range []string{cfg.PluginDir(), filepath.Dir(cfg.PodResourcesSocket())} {
		if !mounts[p] {
			t.Errorf("DaemonSet does not mount %s", p)
		}
	}
}
