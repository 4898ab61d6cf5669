package prepare

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/isolation"
	"github.com/gpushare/gpushare/test/util/gpuclient"
)

// TestRealGPUPrepare prepares claims on this machine's first NVIDIA card
// with real NVML and mps mode, as the DRA driver does, and runs CUDA
// processes with what each claim's CDI spec gives a container (make
// gpu-check; skipped unless GPUSHARE_REAL_GPU=1, with
// GPUSHARE_REAL_GPU_PYTHON and GPUSHARE_REAL_GPU_MPS_CONTROL as for the
// device plugin's TestRealGPU): each claim is held to its share, a process
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
			c.Mounts = append(c.Mounts, gpuclient.Mount{HostPath: m.HostPath, ContainerPath: m.ContainerPath})
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
