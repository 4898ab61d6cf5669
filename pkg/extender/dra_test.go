package extender

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/util"
)

// fakeClaims is a ClaimSource over a map namespace/name -> claim.
type fakeClaims map[string]*resourcev1.ResourceClaim

func (f fakeClaims) Claim(namespace, name string) (*resourcev1.ResourceClaim, bool) {
	cl, ok := f[namespace+"/"+name]
	return cl, ok
}

func (fakeClaims) DRAUnit() string { return gpushare.UnitGiB }

// lateClaims is a ClaimSource whose informer gets its claims after the
// first misses lookups.
type lateClaims struct {
	fakeClaims
	misses int
}

func (l *lateClaims) Claim(namespace, name string) (*resourcev1.ResourceClaim, bool) {
	if l.misses > 0 {
		l.misses--
		return nil, false
	}
	return l.fakeClaims.Claim(namespace, name)
}

// claimOf is a claim asking gib GiB of count devices of the driver's class.
func claimOf(gib int64, count int64) *resourcev1.ResourceClaim {
	tmpl := draclaim.Template(resource.NewQuantity(gib<<30, resource.BinarySI))
	cl := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p-gpu"}, Spec: tmpl.Spec.Spec}
	cl.Spec.Devices.Requests[0].Exactly.Count = count
	return cl
}

// claimPod is a converted pod with the marker, its claim p-gpu made.
func claimPod() *corev1.Pod {
	p := util.MakePod("p").Container("c0").Obj()
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{gpushare.ResourceDRAClaim: resource.MustParse("1")}
	p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: draclaim.ClaimName}}
	p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: draclaim.ClaimName, ResourceClaimTemplateName: ptr.To("gpushare-gpu-mem-8gi")}}
	p.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: draclaim.ClaimName, ResourceClaimName: ptr.To("p-gpu")}}
	return p
}

// TestFilterDRA: filter answers a pod carrying gpushare.io/dra-claim from
// the DRA nodes' cards: the best nodes for the card DRA's first fit takes
// (binpack here: dra-busy, whose first card in slice order holds 8 GiB),
// never the device plugin's; wherever it cannot rate, it passes every
// node (node choice off, the claim unknown or of another shape, no node
// fitting in its view), so the pod is never failed for it, waiting up to
// claimWait for a claim its informer has not seen; a pod asking gpu-mem
// too is an error.
func TestFilterDRA(t *testing.T) {
	logger, _ := ktesting.NewTestContext(t)
	c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"dra-free", "dra-busy"} {
		if err := c.SetDRANode(n, gpushare.UnitGiB, []allocator.Card{{Index: 0, Total: 16, Healthy: true, Rank: 1}, {Index: 1, Total: 16, Healthy: true}}); err != nil {
			t.Fatal(err)
		}
		if err := c.SetNode(util.MakeNode(n).Obj()); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SetNode(util.MakeNode("plugin").Cards("T4", 16).Obj()); err != nil {
		t.Fatal(err)
	}
	// 8 GiB on dra-busy's card 1, the first in its slice.
	c.UpsertClaim(&kubeinfo.PodInfo{Name: "held", Namespace: "default", UID: "held", NodeName: "dra-busy", Phase: corev1.PodRunning, LegacyIndex: -1,
		Demand:     gpushare.Demand{{Name: "d", Units: 8, Cards: 1}},
		Allocation: &gpushare.Allocation{Node: "dra-busy", Unit: "GiB", Containers: []gpushare.ContainerAllocation{{Name: "d", Devices: []gpushare.DeviceShare{{Index: 1, Units: 8}}}}}})
	all := []string{"dra-free", "dra-busy", "plugin"}
	both := claimPod()
	both.Spec.Containers[0].Resources.Limits[gpushare.ResourceGPUMem] = resource.MustParse("4")
	for _, tc := range []struct {
		name      string
		claims    ClaimSource
		pod       *corev1.Pod
		want      []string
		wantError string
	}{
		{name: "rated", claims: fakeClaims{"default/p-gpu": claimOf(8, 1)}, pod: claimPod(), want: []string{"dra-busy"}},
		{name: "node choice off", pod: claimPod(), want: all},
		{name: "claim not known within claimWait", claims: fakeClaims{}, pod: claimPod(), want: all},
		{name: "claim reaching the informer during the call", claims: &lateClaims{fakeClaims: fakeClaims{"default/p-gpu": claimOf(8, 1)}, misses: 3}, pod: claimPod(), want: []string{"dra-busy"}},
		{name: "claim of two cards", claims: fakeClaims{"default/p-gpu": claimOf(8, 2)}, pod: claimPod(), want: all},
		{name: "fits nowhere in the extender's view", claims: fakeClaims{"default/p-gpu": claimOf(24, 1)}, pod: claimPod(), want: all},
		{name: "gpu-mem too", claims: fakeClaims{"default/p-gpu": claimOf(8, 1)}, pod: both, wantError: "not both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandlers(t, logger, HandlersConfig{Placer: c, Viewer: c, Ready: func() bool { return true }, Claims: tc.claims})
			body := extenderArgs(t, tc.pod, all...)
			rec := httptest.NewRecorder()
			h.Router().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Prefix+"/filter", strings.NewReader(body)))
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var res extenderv1.ExtenderFilterResult
			if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
				t.Fatal(err)
			}
			if tc.wantError != "" {
				if !strings.Contains(res.Error, tc.wantError) {
					t.Errorf("error %q, want one containing %q", res.Error, tc.wantError)
				}
				return
			}
			if res.Error != "" || res.NodeNames == nil {
				t.Fatalf("answer %+v", res)
			}
			if diff := cmp.Diff(tc.want, *res.NodeNames); diff != "" {
				t.Errorf("nodes passed (-want +got):\n%s", diff)
			}
		})
	}
}
