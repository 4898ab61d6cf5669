package devices

import (
	"flag"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

var update = flag.Bool("update", false, "rewrite the slices kubectl inspect gpushare's tests read")

// inspectSlices is where pkg/inspect (root module: it cannot import this
// one) reads the slices this driver publishes.
const inspectSlices = "../../../pkg/inspect/testdata/dra-slices.yaml"

// TestInspectFixtureIsCurrent: the ResourceSlices that kubectl inspect
// gpushare's TestDRASlicesFromTheDriver reads are the ones List publishes
// today, for a node in GiB (n-gib) and one in MiB (n-mib), each with a
// Tesla-T4 in mps mode and an unhealthy A100 in driver mode, largest
// first. Run with -update after changing what the driver publishes, then
// run pkg/inspect's tests.
func TestInspectFixtureIsCurrent(t *testing.T) {
	cards := []Card{
		{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "Tesla-T4", MemoryMiB: 15360}, CapacityMiB: 15360, Isolation: gpushare.IsolationMPS},
		{Card: gpushare.Card{Index: 1, UUID: "GPU-1", Model: "A100-SXM4-40GB", MemoryMiB: 40960}, CapacityMiB: 40960, Isolation: gpushare.IsolationDriver},
	}
	list := map[string]any{"apiVersion": "v1", "kind": "List"}
	var items []any
	for _, n := range []struct{ node, unit string }{{"n-gib", gpushare.UnitGiB}, {"n-mib", gpushare.UnitMiB}} {
		items = append(items, &resourceapi.ResourceSlice{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceSlice"},
			ObjectMeta: metav1.ObjectMeta{Name: n.node + "-" + DriverName},
			Spec: resourceapi.ResourceSliceSpec{Driver: DriverName, NodeName: ptr.To(n.node),
				Pool:    resourceapi.ResourcePool{Name: n.node, Generation: 1, ResourceSliceCount: 1},
				Devices: List(cards, OrderLargestFirst, Info{Unit: n.unit, DriverVersion: "580.159.04", Unhealthy: map[string]bool{"GPU-1": true}})},
		})
	}
	list["items"] = items
	got, err := yaml.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	got = append([]byte("# Written by dra/pkg/devices TestInspectFixtureIsCurrent (-update): what the DRA driver publishes.\n"), got...)
	if *update {
		if err := os.WriteFile(inspectSlices, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(inspectSlices)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("%s is not what List publishes (-file +now); run go test ./pkg/devices -run %s -update, then pkg/inspect's tests:\n%s", inspectSlices, t.Name(), diff)
	}
}
