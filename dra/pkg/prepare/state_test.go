package prepare

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpushare/gpushare/dra/pkg/checkpoint"
	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/isolation"
)

// testCards are two 16 GiB cards, one in driver mode, one in none.
func testCards() []devices.Card {
	return []devices.Card{
		{Card: gpushare.Card{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", Model: "Tesla-T4", MemoryMiB: 16384}, CapacityMiB: 16384, Isolation: gpushare.IsolationDriver},
		{Card: gpushare.Card{Index: 1, UUID: "GPU-11111111-1111-1111-1111-111111111111", Model: "Tesla-T4", MemoryMiB: 16384}, CapacityMiB: 16384, Isolation: gpushare.IsolationNone},
	}
}

// newTestState returns a state over testCards with its checkpoint and CDI
// specs in temporary directories, and the CDI directory.
func newTestState(t *testing.T, dataDir, cdiDir string) *State {
	t.Helper()
	cards := testCards()
	spec, err := isolation.NewCDISpec(cdiDir, "/usr/bin/nvidia-cdi-hook", map[int]int64{0: 16384})
	if err != nil {
		t.Fatal(err)
	}
	enf, err := isolation.NewEnforcer([]isolation.Card{
		{Card: gpushare.Card{Index: 0, UUID: cards[0].UUID, MemoryMiB: 16384}, Mode: gpushare.IsolationDriver},
		{Card: gpushare.Card{Index: 1, UUID: cards[1].UUID, MemoryMiB: 16384}, Mode: gpushare.IsolationNone},
	}, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	specs, err := NewClaimSpecs(cdiDir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Pool: "node-a", Unit: gpushare.UnitGiB, Cards: cards, CheckpointDir: dataDir, Specs: specs, Enforcer: enf})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// result is an allocation result of request "gpu" on node-a.
func result(device string, gib int64, share string) resourceapi.DeviceRequestAllocationResult {
	r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: devices.DriverName, Pool: "node-a", Device: device}
	if gib > 0 {
		r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{devices.CapacityMemory: *resource.NewQuantity(gib<<30, resource.BinarySI)}
	}
	if share != "" {
		r.ShareID = ptr.To(types.UID(share))
	}
	return r
}

func claim(name string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results},
		}},
	}
}

func TestPrepareAnswersAndCountsCapacity(t *testing.T) {
	ctx := context.Background()
	dataDir, cdiDir := t.TempDir(), t.TempDir()
	s := newTestState(t, dataDir, cdiDir)

	got, err := s.Prepare(ctx, claim("a", result("gpu-0", 4, "s1")))
	if err != nil {
		t.Fatal(err)
	}
	want := []checkpoint.Device{{Request: "gpu", Pool: "node-a", Device: "gpu-0", UUID: testCards()[0].UUID, Index: 0, MiB: 4096, ShareID: "s1",
		CDIDeviceIDs: []string{"gpushare.io/gpu-claim=uid-a-gpu", "gpushare.io/gpu-mem=0-4096"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Prepare (-want +got):\n%s", diff)
	}
	for _, c := range []*resourceapi.ResourceClaim{claim("b", result("gpu-0", 8, "s2")), claim("c", result("gpu-0", 4, "s3"))} {
		if _, err := s.Prepare(ctx, c); err != nil {
			t.Fatalf("preparing %s: %v", c.Name, err)
		}
	}
	if diff := cmp.Diff(map[string]int64{"gpu-0": 16384}, s.Used()); diff != "" {
		t.Errorf("Used after 4+8+4 GiB (-want +got):\n%s", diff)
	}
	_, err = s.Prepare(ctx, claim("d", result("gpu-0", 1, "s4")))
	if err == nil || !strings.Contains(err.Error(), "already hold 16384 of its 16384 MiB") {
		t.Errorf("a 17th GiB on gpu-0: err = %v, want an over-commit refusal naming the numbers", err)
	}
	if _, ok := s.Prepared()["uid-d"]; ok {
		t.Error("the refused claim is in the checkpoint")
	}
	if _, err := os.Stat(filepath.Join(cdiDir, ClaimSpecPrefix+"uid-d.yaml")); !os.IsNotExist(err) {
		t.Errorf("the refused claim has a CDI spec: %v", err)
	}

	// Prepared again (kubelet retries): the same answer, nothing counted twice.
	again, err := s.Prepare(ctx, claim("a", result("gpu-0", 4, "s1")))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, again); diff != "" {
		t.Errorf("Prepare again (-want +got):\n%s", diff)
	}
	if got := s.Used()["gpu-0"]; got != 16384 {
		t.Errorf("Used[gpu-0] after preparing a claim twice = %d, want 16384", got)
	}

	if err := s.Unprepare(ctx, "uid-b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Unprepare(ctx, "uid-b"); err != nil {
		t.Errorf("Unprepare of a claim no longer prepared: %v", err)
	}
	if got := s.Used()["gpu-0"]; got != 8192 {
		t.Errorf("Used[gpu-0] after unpreparing 8 GiB = %d, want 8192", got)
	}
	if _, err := s.Prepare(ctx, claim("e", result("gpu-0", 8, "s5"))); err != nil {
		t.Errorf("8 GiB into the 8 GiB freed: %v", err)
	}
}

func TestPrepareRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim *resourceapi.ResourceClaim
		want  string
	}{
		{name: "unallocated", claim: &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "x", UID: "u"}}, want: "claim default/x is not allocated"},
		{name: "other pool", claim: func() *resourceapi.ResourceClaim {
			c := claim("x", result("gpu-0", 4, ""))
			c.Status.Allocation.Devices.Results[0].Pool = "node-b"
			return c
		}(), want: "device gpu-0 of pool node-b, and this driver serves pool node-a"},
		{name: "unknown device", claim: claim("x", result("gpu-7", 4, "")), want: "device gpu-7, which node node-a does not have (its devices: gpu-0, gpu-1)"},
		{name: "over one card in one claim", claim: claim("x", result("gpu-1", 10, "a"), result("gpu-1", 10, "b")), want: "asks 20480 MiB of gpu-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestState(t, t.TempDir(), t.TempDir())
			_, err := s.Prepare(context.Background(), tc.claim)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Prepare: err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestPrepareWholeCardWithoutConsumedCapacity(t *testing.T) {
	s := newTestState(t, t.TempDir(), t.TempDir())
	ctx := context.Background()
	if _, err := s.Prepare(ctx, claim("whole", result("gpu-1", 0, ""))); err != nil {
		t.Fatal(err)
	}
	if got := s.Used()["gpu-1"]; got != 16384 {
		t.Errorf("a result without consumed capacity holds %d MiB, want the whole card, 16384", got)
	}
	if _, err := s.Prepare(ctx, claim("more", result("gpu-1", 1, "s"))); err == nil {
		t.Error("a card held whole took another claim")
	}
}

func TestClaimSpecEnvironment(t *testing.T) {
	cdiDir := t.TempDir()
	s := newTestState(t, t.TempDir(), cdiDir)
	if _, err := s.Prepare(context.Background(), claim("a", result("gpu-1", 4, "s1"))); err != nil {
		t.Fatal(err)
	}
	spec, err := cdi.ReadSpec(filepath.Join(cdiDir, ClaimSpecPrefix+"uid-a.yaml"), 0)
	if err != nil {
		t.Fatal(err)
	}
	devs := spec.Devices
	if len(devs) != 1 || devs[0].Name != "uid-a-gpu" {
		t.Fatalf("devices of the claim's spec: %+v, want one, uid-a-gpu", devs)
	}
	want := []string{
		"ALIYUN_COM_GPU_MEM_CONTAINER=4",
		"ALIYUN_COM_GPU_MEM_DEV=16",
		"ALIYUN_COM_GPU_MEM_IDX=1",
		"ALIYUN_COM_GPU_MEM_POD=4",
		"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4G",
		"GPUSHARE_ISOLATION=none",
		"GPUSHARE_MEMORY_FRACTION=0.25",
		"GPUSHARE_MEMORY_LIMIT_MIB=4096",
		"NVIDIA_VISIBLE_DEVICES=GPU-11111111-1111-1111-1111-111111111111",
	}
	if diff := cmp.Diff(want, devs[0].ContainerEdits.Env); diff != "" {
		t.Errorf("environment (-want +got):\n%s", diff)
	}
}

func TestRestoreAfterRestart(t *testing.T) {
	ctx := context.Background()
	dataDir, cdiDir := t.TempDir(), t.TempDir()
	s := newTestState(t, dataDir, cdiDir)
	for _, c := range []*resourceapi.ResourceClaim{claim("a", result("gpu-0", 4, "s1")), claim("b", result("gpu-1", 12, "s2"))} {
		if _, err := s.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// The runtime's spec directory lost a claim's spec, and holds one of
	// a claim the checkpoint never recorded (a crash between the two).
	if err := os.Remove(filepath.Join(cdiDir, ClaimSpecPrefix+"uid-a.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cdiDir, ClaimSpecPrefix+"uid-orphan.yaml"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}

	restarted := newTestState(t, dataDir, cdiDir)
	if err := restarted.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int64{"gpu-0": 4096, "gpu-1": 12288}, restarted.Used()); diff != "" {
		t.Errorf("Used after a restart (-want +got):\n%s", diff)
	}
	got, err := restarted.specs.Claims()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]types.UID{"uid-a", "uid-b"}, got); diff != "" {
		t.Errorf("claim specs after Restore (-want +got):\n%s", diff)
	}
	if _, err := restarted.Prepare(ctx, claim("c", result("gpu-1", 5, "s3"))); err == nil {
		t.Error("after a restart, 5 GiB went onto a card whose 12 of 16 GiB a restored claim holds")
	}
}

// retainRecorder is an Enforcer that records what RetainMPS is told.
type retainRecorder struct {
	Enforcer
	held [][][]isolation.Share
}

func (r *retainRecorder) RetainMPS(ctx context.Context, held [][]isolation.Share, minAge time.Duration) error {
	r.held = append(r.held, held)
	return r.Enforcer.RetainMPS(ctx, held, minAge)
}

// TestUnprepareRetainsMPSShares: after each Unprepare, and after a
// Restore, mps mode hears the shares the prepared claims still hold, each
// request's cards in order, so that a card's default pinned limit follows
// the largest share still served and drops to the floor when none is.
func TestUnprepareRetainsMPSShares(t *testing.T) {
	ctx := context.Background()
	dataDir, cdiDir := t.TempDir(), t.TempDir()
	s := newTestState(t, dataDir, cdiDir)
	rec := &retainRecorder{Enforcer: s.enforcer}
	s.enforcer = rec
	uuid0, uuid1 := testCards()[0].UUID, testCards()[1].UUID
	for _, c := range []*resourceapi.ResourceClaim{
		claim("a", result("gpu-0", 4, "s1")),
		claim("b", result("gpu-0", 8, "s2"), result("gpu-1", 2, "s3")),
	} {
		if _, err := s.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, uid := range []types.UID{"uid-a", "uid-b"} {
		if err := s.Unprepare(ctx, uid); err != nil {
			t.Fatal(err)
		}
	}
	want := [][][]isolation.Share{
		{{{UUID: uuid0, MiB: 8192}, {UUID: uuid1, MiB: 2048}}}, // a gone: b's request on two cards
		nil, // b gone: nothing held
	}
	if diff := cmp.Diff(want, rec.held); diff != "" {
		t.Errorf("shares retained (-want +got):\n%s", diff)
	}

	if _, err := s.Prepare(ctx, claim("c", result("gpu-1", 6, "s4"))); err != nil {
		t.Fatal(err)
	}
	restarted := newTestState(t, dataDir, cdiDir)
	rec2 := &retainRecorder{Enforcer: restarted.enforcer}
	restarted.enforcer = rec2
	if err := restarted.Restore(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][][]isolation.Share{{{{UUID: uuid1, MiB: 6144}}}}, rec2.held); diff != "" {
		t.Errorf("shares retained after Restore (-want +got):\n%s", diff)
	}
}

// TestMPSLogDirectoryReadOnly: a claim on an mps card gets the card's
// pipe directory and the shared /dev/shm read-write, and its log
// directory read-only: the MPS server, which may run as root, writes its
// log there, and a tenant that could plant a symlink in it could have the
// server append to another card's files.
func TestMPSLogDirectoryReadOnly(t *testing.T) {
	ctx := context.Background()
	uuid := testCards()[0].UUID
	root := t.TempDir()
	// The daemons' side answers at once: the card's daemon serves 16 GiB.
	if err := os.MkdirAll(filepath.Join(root, uuid), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, uuid, "status.json"), []byte(`{"defaultLimitMiB": 16384}`), 0o644); err != nil {
		t.Fatal(err)
	}
	mps := isolation.NewMPS(isolation.MPSConfig{Root: root, GPUs: gpu.NewFake([]gpu.Device{{Card: gpushare.Card{Index: 0, UUID: uuid}}})})
	enf, err := isolation.NewEnforcer([]isolation.Card{{Card: gpushare.Card{Index: 0, UUID: uuid, MemoryMiB: 16384}, Mode: gpushare.IsolationMPS}}, nil, mps)
	if err != nil {
		t.Fatal(err)
	}
	cdiDir := t.TempDir()
	specs, err := NewClaimSpecs(cdiDir)
	if err != nil {
		t.Fatal(err)
	}
	cards := testCards()[:1]
	cards[0].Isolation = gpushare.IsolationMPS
	s, err := New(Config{Pool: "node-a", Unit: gpushare.UnitGiB, Cards: cards, CheckpointDir: t.TempDir(), Specs: specs, Enforcer: enf})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prepare(ctx, claim("a", result("gpu-0", 4, "s1"))); err != nil {
		t.Fatal(err)
	}
	spec, err := cdi.ReadSpec(filepath.Join(cdiDir, ClaimSpecPrefix+"uid-a.yaml"), 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{} // container path -> options
	for _, m := range spec.Devices[0].ContainerEdits.Mounts {
		got[m.ContainerPath] = m.Options
	}
	want := map[string][]string{
		isolation.ContainerMPSPipeDir: {"rbind", "rw"},
		isolation.ContainerMPSLogDir:  {"rbind", "ro"},
		isolation.DevShm:              {"rbind", "rw"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mounts of an mps claim: container path -> options (-want +got):\n%s", diff)
	}
}
