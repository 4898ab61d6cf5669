package prepare

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/isolation"
	"github.com/gpushare/gpushare/test/util/gpuclient"
)

// TestRealGPUPrepare prepares claims on this machine's first NVIDIA card
// with real NVML and mps mode, as the DRA driver does, and runs CUDA
// processes with what each claim's CDI spec gives a container (make
// gpu-check; skipped unless GPUSHARE_REAL_GPU=1, with
// GPUSHARE_REAL_GPU_PYTHON and GPUSHARE_REAL_GPU_MPS_CONTROL as for the
// device plugin's TestRealGPU, and GPUSHARE_REAL_GPU_RUNC): each claim is
// held to its share, the two at once in containers run by runc where runc
// is (gpuclient.StartIn), a process
// that drops its limit gets the largest share prepared, and the limit
// follows the claims as they are unprepared, down to the floor.
func TestRealGPUPrepare(t *testing.T) {
	n, devs := gpuclient.Open(t, 24<<10)
	_, ctx := ktesting.NewTestContext(t)
	python, control := gpuclient.Python(), gpuclient.MPSControl()
	cards, err := devices.CardsOf("node-a", devs, gpushare.UnitGiB, n)
	if err != nil {
		t.Fatal(err)
	}
	root, cdiDir := gpuclient.MPSRoot(t), t.TempDir()
	enf, modes, stop, err := isolation.Setup(ctx, isolation.SetupConfig{
		Node: "node-a", Request: string(isolation.RequestMPS), MPSControl: control, MPSRoot: root,
		CDIDir: cdiDir, CDIHook: "/usr/bin/nvidia-cdi-hook", MPSDaemonsInProcess: true,
	}, n, devs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	for i := range cards {
		cards[i].Isolation = modes[i]
	}
	checkSlice(t, n, cards)
	specs, err := NewClaimSpecs(cdiDir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Pool: "node-a", Unit: gpushare.UnitGiB, Cards: cards, CheckpointDir: t.TempDir(), Specs: specs, Enforcer: enf})
	if err != nil {
		t.Fatal(err)
	}
	uuid := cards[0].UUID
	claims := map[string]gpuclient.Container{}
	for _, c := range []*resourceapi.ResourceClaim{claim("a", result("gpu-0", 8, "s1")), claim("b", result("gpu-0", 16, "s2"))} {
		if _, err := s.Prepare(ctx, c); err != nil {
			t.Fatal(err)
		}
		claims[c.Name] = claimContainer(t, specs, c.UID)
		t.Logf("claim %s: %+v", c.Name, claims[c.Name])
	}
	if got := claims["a"].Env[isolation.EnvIsolation]; got != "mps" {
		t.Fatalf("%s=%q, want mps", isolation.EnvIsolation, got)
	}
	check := func(name string, c gpuclient.Container, gib float64, ok bool) {
		t.Helper()
		got := gpuclient.Run(t, python, c, gib)
		t.Logf("%s, %g GiB: ok=%v (cudaMemGetInfo free %d of %d MiB) %s", name, gib, got.OK, got.FreeMiB, got.TotalMiB, got.Error)
		if got.OK != ok {
			t.Errorf("%s, %g GiB: allocated=%v, want %v (%s)", name, gib, got.OK, ok, got.Error)
		}
	}
	// The two claims' containers at once, in containers of their own
	// where runc is (else on the host): each within its share.
	runc := gpuclient.Runc()
	for i, got := range gpuclient.Together(t, runc, python, []gpuclient.Container{claims["a"], claims["b"]}, []float64{6, 12}) {
		t.Logf("claims a and b together (runc %q), client %d: ok=%v (cudaMemGetInfo free %d of %d MiB) %s", runc, i, got.OK, got.FreeMiB, got.TotalMiB, got.Error)
		if !got.OK {
			t.Errorf("claims together, client %d (6 of 8 GiB, 12 of 16 GiB): %s; want both to hold their memory and compute", i, got.Error)
		}
	}
	noLimit := claims["a"].Without(isolation.EnvMPSPinnedLimit)
	check("8 GiB claim", claims["a"], 6, true)
	check("8 GiB claim", claims["a"], 10, false)
	check("16 GiB claim", claims["b"], 12, true)
	check("16 GiB claim", claims["b"], 18, false)
	check("no limit of its own, 8 and 16 GiB prepared", noLimit, 12, true)
	check("no limit of its own, 8 and 16 GiB prepared", noLimit, 18, false)

	if err := s.Unprepare(ctx, "uid-b"); err != nil {
		t.Fatal(err)
	}
	waitMPSStatus(t, root, uuid, 8192)
	check("no limit of its own, 8 GiB prepared", noLimit, 10, false)
	check("no limit of its own, 8 GiB prepared", noLimit, 6, true)
	if err := s.Unprepare(ctx, "uid-a"); err != nil {
		t.Fatal(err)
	}
	waitMPSStatus(t, root, uuid, isolation.MPSFloorMiB)
	check("no limit of its own, nothing prepared", noLimit, 1, false)
}

// checkSlice compares the device the driver publishes for the first card
// (devices.List over real NVML) with what nvidia-smi says of it: the UUID,
// model and driver version, and a memory capacity of the card's total
// rounded down to whole GiB, shared (multiple allocations) in mps mode.
func checkSlice(t *testing.T, n *gpu.NVML, cards []devices.Card) {
	t.Helper()
	info := devices.Info{Unit: gpushare.UnitGiB}
	drv, err := n.Driver()
	if err != nil {
		t.Fatal(err)
	}
	info.DriverVersion = drv.Version
	list := devices.List(cards, devices.DefaultOrder, info)
	b, _ := json.Marshal(list[0])
	t.Logf("published: %s", b)
	out, err := exec.Command("nvidia-smi", "--query-gpu=uuid,name,driver_version,memory.total", "--format=csv,noheader,nounits", "-i", "0").Output()
	if err != nil {
		t.Fatalf("nvidia-smi: %v", err)
	}
	t.Logf("nvidia-smi: %s", strings.TrimSpace(string(out)))
	f := strings.Split(strings.TrimSpace(string(out)), ", ")
	if len(f) != 4 {
		t.Fatalf("nvidia-smi printed %q, want four fields", out)
	}
	totalMiB, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	d := list[0]
	str := func(name resourceapi.QualifiedName) string {
		if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
			return *a.StringValue
		}
		return ""
	}
	want := map[string]string{"uuid": f[0], "model": f[1], "driverVersion": f[2], "isolation": "mps"}
	got := map[string]string{}
	for k := range want {
		got[k] = str(resourceapi.QualifiedName(k))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("device %s's attributes (-nvidia-smi +published):\n%s", d.Name, diff)
	}
	c := d.Capacity[devices.CapacityMemory]
	if wantGiB := totalMiB / 1024; c.Value.Value() != wantGiB<<30 {
		t.Errorf("device %s's memory capacity is %s, want %d GiB (nvidia-smi: %d MiB)", d.Name, c.Value.String(), wantGiB, totalMiB)
	}
	if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
		t.Errorf("device %s allows no multiple allocations", d.Name)
	}
}

// claimContainer is what a container using request "gpu" of claim uid
// gets from the claim's CDI spec.
func claimContainer(t *testing.T, specs *ClaimSpecs, uid types.UID) gpuclient.Container {
	t.Helper()
	b, err := os.ReadFile(specs.path(uid))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := yaml.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	for _, d := range spec.Devices {
		if d.Name != deviceName(uid, "gpu") {
			continue
		}
		c := gpuclient.Container{Env: map[string]string{}}
		for _, kv := range d.ContainerEdits.Env {
			k, v, _ := strings.Cut(kv, "=")
			c.Env[k] = v
		}
		for _, m := range d.ContainerEdits.Mounts {
			c.Mounts = append(c.Mounts, gpuclient.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath, ReadOnly: slices.Contains(m.Options, "ro")})
		}
		return c
	}
	t.Fatalf("claim %s's spec has no device for request gpu:\n%s", uid, b)
	return gpuclient.Container{}
}

// waitMPSStatus waits until the daemons' side says card uuid's daemon
// runs with a default limit of mib.
func waitMPSStatus(t *testing.T, root, uuid string, mib int64) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		b, err := os.ReadFile(filepath.Join(root, uuid, "status.json"))
		if err != nil {
			continue
		}
		last = string(b)
		var st struct {
			DefaultLimitMiB int64 `json:"defaultLimitMiB"`
		}
		if json.Unmarshal(b, &st) == nil && st.DefaultLimitMiB == mib {
			return
		}
	}
	t.Fatalf("the MPS daemon of %s did not take a default limit of %d MiB in 15 s; status: %s", uuid, mib, last)
}
