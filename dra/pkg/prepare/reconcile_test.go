package prepare

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// users is a ClaimUsers of the claims named, as namespace/name.
type users []string

func (u users) ClaimInUse(namespace, name string) bool { return slices.Contains(u, namespace+"/"+name) }

// TestReconcile: of the prepared claims, those the API no longer has (or
// has another of the name), no longer allocates, or allocates on another
// pool are dropped, with their CDI specs, unless a pod on the node still
// uses them; a claim the API allocates here, and one the API cannot be
// asked about, are kept.
func TestReconcile(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cdiDir := t.TempDir()
	s := newTestState(t, t.TempDir(), cdiDir)
	prepared := map[string]*resourceapi.ResourceClaim{
		"here":        claim("here", result("gpu-0", 2, "s1")),
		"gone":        claim("gone", result("gpu-0", 2, "s2")),
		"recreated":   claim("recreated", result("gpu-0", 2, "s3")),
		"deallocated": claim("deallocated", result("gpu-0", 2, "s4")),
		"moved":       claim("moved", result("gpu-1", 2, "s5")),
		"gone-in-use": claim("gone-in-use", result("gpu-1", 2, "s6")),
		"flaky":       claim("flaky", result("gpu-1", 2, "s7")),
	}
	for _, c := range prepared {
		if _, err := s.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// What the API holds now.
	recreated := claim("recreated", result("gpu-0", 2, "s3"))
	recreated.UID = "uid-recreated-2"
	deallocated := claim("deallocated")
	deallocated.Status.Allocation = nil
	moved := claim("moved", result("gpu-1", 2, "s5"))
	moved.Status.Allocation.Devices.Results[0].Pool = "node-b"
	client := fake.NewClientset(prepared["here"], recreated, deallocated, moved, prepared["flaky"])
	client.PrependReactor("get", "resourceclaims", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "flaky" {
			return true, nil, errors.New("connection refused")
		}
		return false, nil, nil
	})

	dropped, err := s.Reconcile(ctx, APIClaims{Client: client}, users{"default/gone-in-use"})
	if err == nil {
		t.Error("Reconcile: no error for the claim the API did not answer about")
	}
	if diff := cmp.Diff([]types.UID{"uid-deallocated", "uid-gone", "uid-moved", "uid-recreated"}, dropped); diff != "" {
		t.Errorf("dropped (-want +got):\n%s", diff)
	}
	var kept []types.UID
	for uid := range s.Prepared() {
		kept = append(kept, uid)
	}
	slices.Sort(kept)
	if diff := cmp.Diff([]types.UID{"uid-flaky", "uid-gone-in-use", "uid-here"}, kept); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
	specs, err := s.specs.Claims()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(kept, specs); diff != "" {
		t.Errorf("CDI specs left (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]int64{"gpu-0": 2048, "gpu-1": 4096}, s.Used()); diff != "" {
		t.Errorf("Used (-want +got):\n%s", diff)
	}
	if _, err := s.Reconcile(context.Background(), APIClaims{Client: client}, users{}); err == nil {
		t.Error("the second Reconcile: no error for flaky")
	}
	if _, ok := s.Prepared()["uid-gone-in-use"]; ok {
		t.Error("claim gone-in-use kept once no pod uses it")
	}
}
