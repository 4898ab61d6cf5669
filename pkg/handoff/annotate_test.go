package handoff

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// patchAPI records the patches it gets and answers err.
type patchAPI struct {
	mu      sync.Mutex
	patches []string // "namespace/name uid"
	err     error
}

func (p *patchAPI) PatchPodAnnotations(_ context.Context, namespace, name string, uid types.UID, _ map[string]*string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.patches = append(p.patches, namespace+"/"+name+" "+string(uid))
	return p.err
}

// TestAnnotatorPatchesByUID: every patch names the pod's UID; one that
// kube-apiserver refuses because the name now belongs to another pod (see
// test/integration TestDevicePluginPatchCarriesTheUID for the real error)
// is dropped, not retried.
func TestAnnotatorPatchesByUID(t *testing.T) {
	replaced := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", field.ErrorList{
		field.Invalid(field.NewPath("metadata", "uid"), "uid-p", "field is immutable")})
	tests := []struct {
		name        string
		err         error
		wantRetries int
	}{
		{name: "written", err: nil, wantRetries: 0},
		{name: "the name belongs to another pod now", err: replaced, wantRetries: 0},
		{name: "API server unavailable", err: apierrors.NewServiceUnavailable("down"), wantRetries: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			api := &patchAPI{err: tc.err}
			a := NewAnnotator(api)
			defer a.queue.ShutDown()
			h := New(Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards, Notify: a.Enqueue})
			ht := &handoffTest{t: t, ctx: ctx, h: h, used: map[string]bool{}}
			p := ht.pod(util.MakePod("p").GPUMem(4), map[string][]int{"c0": {0}}, 1)
			ht.admit(4) // ASSIGNED becomes "true": one patch
			for a.queue.Len() > 0 {
				a.step(ctx, h)
			}
			if diff := cmp.Diff([]string{"default/p " + string(p.UID)}, api.patches); diff != "" {
				t.Errorf("patches mismatch (-want +got):\n%s", diff)
			}
			if n := a.queue.NumRequeues(p.UID); n != tc.wantRetries {
				t.Errorf("retries scheduled = %d, want %d", n, tc.wantRetries)
			}
		})
	}
}
