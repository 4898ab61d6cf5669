package driver

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/dra/pkg/devices"
)

// renderedChart is the chart's rendering with the DRA driver enabled
// (test/chart Combos, `make chart-update`).
const renderedChart = "../../../manifests/rendered/extender-dra-driver.yaml"

// TestManifests: the chart's DaemonSet runs the driver with arguments its
// flags accept and Validate passes, sets NODE_NAME (--node-name's
// default) from spec.nodeName, and mounts every host directory the
// configuration uses; its DeviceClass is the one the driver's devices are
// published for.
func TestManifests(t *testing.T) {
	b, err := os.ReadFile(renderedChart)
	if err != nil {
		t.Fatal(err)
	}
	var ds *appsv1.DaemonSet
	var class *resourceapi.DeviceClass
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatal(err)
		}
		switch {
		case meta.Kind == "DaemonSet" && meta.Metadata.Name == "gpushare-dra-driver":
			ds = &appsv1.DaemonSet{}
			err = yaml.UnmarshalStrict([]byte(doc), ds)
		case meta.Kind == "DeviceClass":
			class = &resourceapi.DeviceClass{}
			err = yaml.UnmarshalStrict([]byte(doc), class)
		}
		if err != nil {
			t.Fatalf("decoding %s %s: %v", meta.Kind, meta.Metadata.Name, err)
		}
	}
	if ds == nil || class == nil {
		t.Fatalf("%s: DaemonSet gpushare-dra-driver found: %v, DeviceClass found: %v", renderedChart, ds != nil, class != nil)
	}
	if diff := cmp.Diff(devices.DeviceClass().Spec, class.Spec); diff != "" {
		t.Errorf("the chart's DeviceClass spec (-driver +chart):\n%s", diff)
	}
	if class.Name != devices.DeviceClassName {
		t.Errorf("the chart's DeviceClass is %s, the driver's %s", class.Name, devices.DeviceClassName)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	t.Setenv("NODE_NAME", "n1")
	var usage bytes.Buffer
	cfg, _, err := ParseFlags(c.Args, &usage)
	if err != nil {
		t.Fatalf("the DaemonSet's arguments %v: %v\n%s", c.Args, err, usage.String())
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("the DaemonSet's arguments %v: %v", c.Args, err)
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Error("the DaemonSet does not set NODE_NAME from spec.nodeName (--node-name's default)")
	}
	hostPaths := map[string]string{}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounted := map[string]string{} // container path -> host path
	for _, m := range c.VolumeMounts {
		mounted[m.MountPath] = hostPaths[m.Name]
	}
	for _, p := range []string{cfg.PluginDataDir(), cfg.RegistryDir(), cfg.CDIDir, cfg.MPSRoot} {
		if mounted[p] != p {
			t.Errorf("the DaemonSet mounts %q at %s, want the host's %s", mounted[p], p, p)
		}
	}
	if cfg.MPSDaemons != "external" {
		t.Errorf("--mps-daemons=%s with the chart's mps-daemons DaemonSet rendered (isolation %s), want external", cfg.MPSDaemons, cfg.Isolation)
	}
}
