package draclaim

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// apply applies patch to pod as the API server does and returns the result.
func apply(t *testing.T, pod *corev1.Pod, patch []PatchOp) *corev1.Pod {
	t.Helper()
	doc, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(patch)
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatalf("decoding the patch %s: %v", raw, err)
	}
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("applying the patch %s: %v", raw, err)
	}
	var got corev1.Pod
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// TestConvert: the patched pod and the template of each convertible shape,
// against golden files (go test ./pkg/draclaim -update rewrites them). The
// patched pod must also read back as asking no GPU memory, name the claim in
// exactly the container that asked, and keep everything else.
func TestConvert(t *testing.T) {
	withClaims := util.MakePod("p").GPUMem(8).Obj()
	other := "other-template"
	withClaims.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "other", ResourceClaimTemplateName: &other}}
	withClaims.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "other"}}
	limitOnly := util.MakePod("p").GPUMem(4).Obj()
	delete(limitOnly.Spec.Containers[0].Resources.Requests, gpushare.ResourceGPUMem)
	tests := []struct {
		name, unit string
		pod        *corev1.Pod
		container  string
		wantName   string
		wantBytes  int64
		// nodeChoice: the marker gpushare.io/dra-claim is added.
		nodeChoice bool
	}{
		{name: "one-container-gib", unit: "GiB", pod: util.MakePod("p").Container("sidecar").GPUMem(8).Obj(), container: "c1", wantName: "gpushare-gpu-mem-8gi", wantBytes: 8 << 30},
		{name: "mib", unit: "MiB", pod: util.MakePod("p").GPUMem(1536).Obj(), container: "c0", wantName: "gpushare-gpu-mem-1536mi", wantBytes: 1536 << 20},
		{name: "init-container", unit: "GiB", pod: util.MakePod("p").InitGPUMem(2).Container("app").Obj(), container: "i0", wantName: "gpushare-gpu-mem-2gi", wantBytes: 2 << 30},
		{name: "sidecar", unit: "GiB", pod: util.MakePod("p").SidecarGPUMem(1).Container("app").Obj(), container: "i0", wantName: "gpushare-gpu-mem-1gi", wantBytes: 1 << 30},
		{name: "existing-claims-and-annotations", unit: "GiB", pod: util.MakePod("p").Annotation("team", "a").Obj(), container: "c0", wantName: "gpushare-gpu-mem-8gi", wantBytes: 8 << 30},
		{name: "limit-only", unit: "GiB", pod: limitOnly, container: "c0", wantName: "gpushare-gpu-mem-4gi", wantBytes: 4 << 30},
		{name: "a-tebibyte", unit: "GiB", pod: util.MakePod("p").GPUMem(1024).Obj(), container: "c0", wantName: "gpushare-gpu-mem-1ti", wantBytes: 1 << 40},
		{name: "node-choice", unit: "GiB", pod: util.MakePod("p").Container("sidecar").GPUMem(8).Obj(), container: "c1", wantName: "gpushare-gpu-mem-8gi", wantBytes: 8 << 30, nodeChoice: true},
		{name: "node-choice-limit-only", unit: "GiB", pod: limitOnly.DeepCopy(), container: "c0", wantName: "gpushare-gpu-mem-4gi", wantBytes: 4 << 30, nodeChoice: true},
		{name: "node-choice-mib", unit: "MiB", pod: util.MakePod("p").GPUMem(1536).Obj(), container: "c0", wantName: "gpushare-gpu-mem-1536mi", wantBytes: 1536 << 20, nodeChoice: true},
		// aliyun.com/gpu-count: 1 is valid beside gpu-mem; left on the pod it
		// would send it to the extender's bind, which refuses it.
		{name: "gpu-count-one", unit: "GiB", pod: util.MakePod("p").GPUMemCards(8, 1).Obj(), container: "c0", wantName: "gpushare-gpu-mem-8gi", wantBytes: 8 << 30},
		{name: "node-choice-gpu-count-one", unit: "GiB", pod: util.MakePod("p").GPUMemCards(8, 1).Obj(), container: "c0", wantName: "gpushare-gpu-mem-8gi", wantBytes: 8 << 30, nodeChoice: true},
	}
	tests[4].pod.Spec = withClaims.Spec
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := tt.pod.DeepCopy()
			conv, err := Convert(tt.pod, tt.unit, tt.nodeChoice)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(before, tt.pod); diff != "" {
				t.Errorf("Convert changed its pod (-before +after):\n%s", diff)
			}
			units := tt.wantBytes / map[string]int64{"GiB": 1 << 30, "MiB": 1 << 20}[tt.unit]
			if conv.Template.Name != tt.wantName || conv.Bytes != tt.wantBytes || conv.Units != units {
				t.Errorf("template %s of %d bytes (%d units), want %s of %d", conv.Template.Name, conv.Bytes, conv.Units, tt.wantName, tt.wantBytes)
			}
			got := apply(t, tt.pod, conv.Patch)
			if _, err := gpushare.PodDemand(got); !errors.Is(err, gpushare.ErrNoGPUMem) {
				t.Errorf("the patched pod still asks GPU memory: %v", err)
			}
			for _, c := range append(append([]corev1.Container{}, got.Spec.InitContainers...), got.Spec.Containers...) {
				_, inLimits := c.Resources.Limits[gpushare.ResourceGPUCount]
				_, inRequests := c.Resources.Requests[gpushare.ResourceGPUCount]
				if inLimits || inRequests {
					t.Errorf("container %q still asks %s: limits %v, requests %v", c.Name, gpushare.ResourceGPUCount, c.Resources.Limits, c.Resources.Requests)
				}
				names := false
				for _, rc := range c.Resources.Claims {
					names = names || rc.Name == ClaimName
				}
				if names != (c.Name == tt.container) {
					t.Errorf("container %q names the claim: %t, want %t", c.Name, names, c.Name == tt.container)
				}
				// The marker, in limits and requests, carries the memory
				// in the pod's units: what a quota on it counts.
				want := tt.nodeChoice && c.Name == tt.container
				for field, list := range map[string]corev1.ResourceList{"limits": c.Resources.Limits, "requests": c.Resources.Requests} {
					if q, ok := list[gpushare.ResourceDRAClaim]; ok != want || (ok && q.Value() != units) {
						t.Errorf("container %q %s %v: want %s: %d there %t", c.Name, field, list, gpushare.ResourceDRAClaim, units, want)
					}
				}
			}
			if n := len(got.Spec.ResourceClaims); n != len(before.Spec.ResourceClaims)+1 {
				t.Errorf("%d pod claims, want %d", n, len(before.Spec.ResourceClaims)+1)
			}
			last := got.Spec.ResourceClaims[len(got.Spec.ResourceClaims)-1]
			if last.Name != ClaimName || last.ResourceClaimTemplateName == nil || *last.ResourceClaimTemplateName != tt.wantName {
				t.Errorf("the pod's last claim is %+v, want %s from %s", last, ClaimName, tt.wantName)
			}
			q := conv.Template.Spec.Spec.Devices.Requests[0].Exactly.Capacity.Requests[MemoryCapacity]
			if q.Value() != tt.wantBytes {
				t.Errorf("the template asks %s, want %d bytes", q.String(), tt.wantBytes)
			}
			golden(t, filepath.Join("testdata", tt.name+".yaml"), map[string]any{"template": conv.Template, "pod": got})
		})
	}
}

// TestConvertRefuses: the shapes a one-claim rewrite cannot keep are
// refused with ErrUnsupported and a reason naming what to change; a pod
// that asks no GPU memory gets gpushare.ErrNoGPUMem; a bad unit an error.
func TestConvertRefuses(t *testing.T) {
	named := util.MakePod("p").GPUMem(4).Obj()
	named.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: ClaimName}}
	huge := util.MakePod("p").GPUMem(1).Obj()
	huge.Spec.Containers[0].Resources.Limits[gpushare.ResourceGPUMem] = *resource.NewQuantity(1<<40, resource.DecimalSI)
	huge.Spec.Containers[0].Resources.Requests[gpushare.ResourceGPUMem] = *resource.NewQuantity(1<<40, resource.DecimalSI)
	tests := []struct {
		name    string
		pod     *corev1.Pod
		unit    string
		wantIs  error
		wantMsg string
	}{
		{name: "two GPU containers", pod: util.MakePod("p").GPUMem(4).GPUMem(4).Obj(), unit: "GiB", wantIs: ErrUnsupported, wantMsg: `containers "c0", "c1" all ask aliyun.com/gpu-mem`},
		{name: "init and app GPU containers", pod: util.MakePod("p").InitGPUMem(2).GPUMem(4).Obj(), unit: "GiB", wantIs: ErrUnsupported, wantMsg: `containers "i0", "c0"`},
		{name: "several cards", pod: util.MakePod("p").GPUMemCards(8, 2).Obj(), unit: "GiB", wantIs: ErrUnsupported, wantMsg: "on 2 cards"},
		{name: "claim name taken", pod: named, unit: "GiB", wantIs: ErrUnsupported, wantMsg: `already has a resource claim named "gpushare-gpu-mem"`},
		{name: "too large", pod: huge, unit: "GiB", wantIs: ErrUnsupported, wantMsg: "more than a quantity holds"},
		{name: "no GPU memory", pod: util.MakePod("p").Container("c").Obj(), unit: "GiB", wantIs: gpushare.ErrNoGPUMem},
		{name: "bad unit", pod: util.MakePod("p").GPUMem(4).Obj(), unit: "GB", wantMsg: `memory unit "GB": want GiB or MiB`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conv, err := Convert(tt.pod, tt.unit, false)
			if err == nil {
				t.Fatalf("converted: %+v", conv)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %v, want one wrapping %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q lacks %q", err, tt.wantMsg)
			}
		})
	}
}

// golden compares v, as YAML, with the file at path, or rewrites it under
// -update.
func golden(t *testing.T, path string, v any) {
	t.Helper()
	got, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./pkg/draclaim -update writes it)", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s differs (-want +got; -update rewrites it):\n%s", path, diff)
	}
}
