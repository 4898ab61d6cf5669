package deviceplugin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/klog/v2/ktesting"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/isolation"
	"github.com/gpushare/gpushare/test/util"
)

// fakeMPSControl is a stand-in for nvidia-cuda-mps-control: with -f it
// serves until a client sends quit; a client appends its command to the
// card's directory's "commands" file and succeeds. (The daemon's
// lifecycle is tested in package isolation.)
const fakeMPSControl = `#!/bin/sh
if [ "$1" = "-f" ]; then
  while :; do sleep 0.02; [ -e "$CUDA_MPS_PIPE_DIRECTORY/quit" ] && exit 0; done
fi
read line
echo "$line" >> "$CUDA_MPS_PIPE_DIRECTORY/../commands"
[ "$line" = quit ] && touch "$CUDA_MPS_PIPE_DIRECTORY/quit"
exit 0
`

// isolationCards returns testCards (GiB cards) for the enforcer, all in
// mode.
func isolationCards(mode gpushare.Isolation) []isolation.Card {
	var cards []isolation.Card
	for _, c := range testCards {
		cards = append(cards, isolation.Card{Card: gpushare.Card{Index: c.Index, UUID: c.UUID, MemoryMiB: c.Units * 1024}, Mode: mode})
	}
	return cards
}

// newFakeMPS returns the plugin's side of mps mode over testCards' UUIDs,
// under dir, with the daemons' side running fakeMPSControl until the test
// ends.
func newFakeMPS(ctx context.Context, t *testing.T, dir string) *isolation.MPS {
	t.Helper()
	control := filepath.Join(dir, "nvidia-cuda-mps-control")
	if err := os.WriteFile(control, []byte(fakeMPSControl), 0o700); err != nil { //nolint:gosec // a test script
		t.Fatal(err)
	}
	var devs []gpu.Device
	for _, c := range testCards {
		devs = append(devs, gpu.Device{Card: gpushare.Card{Index: c.Index, UUID: c.UUID}})
	}
	root := filepath.Join(dir, "mps")
	stop := isolation.StartMPSDaemons(context.WithoutCancel(ctx), isolation.MPSDaemonsConfig{Control: control, Root: root, Poll: 10 * time.Millisecond})
	t.Cleanup(stop)
	return isolation.NewMPS(isolation.MPSConfig{Root: root, GPUs: gpu.NewFake(devs)})
}

// TestAllocateIsolationGolden: the whole Allocate response per isolation
// mode, for the request of TestAllocateResponseGolden (a container with 8
// GiB on card 2, one with 4 GiB on each of cards 0 and 1): none (advisory
// environment), driver (the CDI limit device, in the CRI request or in the
// CDI annotation) and mps (the card's daemon directories and the
// client's own limit; the two-card container runs unenforced).
func TestAllocateIsolationGolden(t *testing.T) {
	h, req := goldenRequest()
	tests := []struct {
		name     string
		mode     gpushare.Isolation
		strategy string
	}{
		{name: "none", mode: gpushare.IsolationNone, strategy: StrategyEnvvar},
		{name: "driver-cdi-cri", mode: gpushare.IsolationDriver, strategy: StrategyCDICRI},
		{name: "driver-cdi-annotations", mode: gpushare.IsolationDriver, strategy: StrategyCDIAnnotations},
		{name: "mps", mode: gpushare.IsolationMPS, strategy: StrategyEnvvar},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ctx := ktesting.NewTestContext(t)
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			dir := t.TempDir()
			cards := isolationCards(tc.mode)
			var spec *isolation.CDISpec
			var mps *isolation.MPS
			switch tc.mode {
			case gpushare.IsolationDriver:
				var err error
				if spec, err = isolation.NewCDISpec(filepath.Join(dir, "cdi"), "/usr/bin/nvidia-cdi-hook", map[int]int64{0: 16384}); err != nil {
					t.Fatal(err)
				}
			case gpushare.IsolationMPS:
				mps = newFakeMPS(ctx, t, dir)
			}
			e, err := isolation.NewEnforcer(cards, spec, mps)
			if err != nil {
				t.Fatal(err)
			}
			s := NewServer(testLogger(t), h, testCards, gpushare.UnitGiB, tc.strategy, nil)
			s.SetEnforcer(e)
			resp, err := s.Allocate(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := json.MarshalIndent(resp, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got := strings.ReplaceAll(string(b), dir, "$TMP")
			util.Golden(t, "allocate-isolation-"+tc.name+".json", got+"\n", *update)
			if spec != nil {
				if err := isolation.ValidateCDISpecFile(spec.Path()); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// failingEnforcer refuses containers on the cards in fail (UUID).
type failingEnforcer struct{ fail map[string]bool }

func (f failingEnforcer) Edits(_ context.Context, shares []isolation.Share) (*isolation.Edits, error) {
	for _, sh := range shares {
		if f.fail[sh.UUID] {
			return nil, errors.New("writing the CDI spec: disk full")
		}
	}
	return &isolation.Edits{Mode: gpushare.IsolationNone, Env: map[string]string{}}, nil
}

// TestFailedEnforcementRevokesTheGrant: when a container's limit cannot
// be enforced, Allocate fails and kubelet frees its device IDs, so the
// plugin must not go on believing the container holds them; and a request
// whose second container fails takes back the first container's grant
// too (kubelet records none of them).
func TestFailedEnforcementRevokesTheGrant(t *testing.T) {
	ht := newHandoffTest(t)
	p := ht.pod(util.MakePod("p").GPUMem(4).GPUMem(2), map[string][]int{"c0": {0}, "c1": {2}}, 1)
	ht.kubelet.set(handoff.KubeletPod{Namespace: "default", Name: "p", Containers: map[string][]string{"c0": nil, "c1": nil}})
	s := NewServer(testLogger(t), ht.h, testCards, gpushare.UnitGiB, StrategyEnvvar, nil)
	s.SetEnforcer(failingEnforcer{fail: map[string]bool{"GPU-2": true}})
	req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
		{DevicesIds: unitsOn("GPU-0", 0, 4)},
		{DevicesIds: unitsOn("GPU-2", 0, 2)},
	}}
	if _, err := s.Allocate(ht.ctx, req); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("Allocate error = %v, want the enforcement failure", err)
	}
	for _, c := range []string{"c0", "c1"} {
		if shares, _, ok := ht.h.Grant(p.UID, c); ok {
			t.Errorf("container %s still holds %s after the failed Allocate", c, handoff.DescribeShares(shares))
		}
	}
	if n := ht.h.Waiting(); n != 1 {
		t.Errorf("Waiting() = %d, want 1: the pod waits for kubelet's next try", n)
	}
	if st := ht.h.Stats(); st.Revoked != 2 {
		t.Errorf("Stats().Revoked = %d, want 2", st.Revoked)
	}
	// kubelet tries again once the cause is gone.
	s.SetEnforcer(failingEnforcer{})
	if _, err := s.Allocate(ht.ctx, req); err != nil {
		t.Fatalf("Allocate after the cause is gone: %v", err)
	}
	for _, c := range []string{"c0", "c1"} {
		if _, _, ok := ht.h.Grant(p.UID, c); !ok {
			t.Errorf("container %s holds nothing after a successful Allocate", c)
		}
	}
}

// advisoryEnforcer is an enforcer under which every container runs
// advisory, as a container on several MPS cards does.
type advisoryEnforcer struct{}

func (advisoryEnforcer) Edits(context.Context, []isolation.Share) (*isolation.Edits, error) {
	return &isolation.Edits{Mode: gpushare.IsolationNone, Env: map[string]string{isolation.EnvIsolation: "none"}}, nil
}

// TestEnforcedPodNeverRunsAdvisory: a pod that asks gpushare.io/isolation:
// enforced fails admission, naming why, rather than run with advisory
// limits (here a two-card container on MPS cards, which the extender no
// longer picks, but an older extender or a hand-written annotation may);
// a pod that does not ask runs advisory.
func TestEnforcedPodNeverRunsAdvisory(t *testing.T) {
	for _, enforced := range []bool{true, false} {
		ht := newHandoffTest(t)
		w := util.MakePod("p").GPUMemCards(8, 2)
		if enforced {
			w = w.Enforced()
		}
		p := ht.pod(w, map[string][]int{"c0": {0, 1}}, 1)
		ht.kubelet.set(handoff.KubeletPod{Namespace: "default", Name: "p", Containers: map[string][]string{"c0": nil}})
		s := NewServer(testLogger(t), ht.h, testCards, gpushare.UnitGiB, StrategyEnvvar, nil)
		s.SetEnforcer(advisoryEnforcer{})
		req := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{
			{DevicesIds: append(unitsOn("GPU-0", 0, 4), unitsOn("GPU-1", 0, 4)...)},
		}}
		_, err := s.Allocate(ht.ctx, req)
		if !enforced {
			if err != nil {
				t.Errorf("pod without the annotation: Allocate: %v", err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "asks gpushare.io/isolation: enforced") {
			t.Errorf("enforced pod: Allocate error = %v, want a refusal naming the annotation", err)
		}
		if _, _, ok := ht.h.Grant(p.UID, "c0"); ok {
			t.Error("the refused container still holds a grant")
		}
	}
}

// TestPruneCDIKeepsHeldDevices: driver mode's spec keeps the limit device
// of every container the plugin still believes holds cards, and drops the
// device of a pod that is gone.
func TestPruneCDIKeepsHeldDevices(t *testing.T) {
	ht := newHandoffTest(t)
	p := ht.pod(util.MakePod("p").GPUMem(4), map[string][]int{"c0": {0}}, 1)
	q := ht.pod(util.MakePod("q").GPUMem(2), map[string][]int{"c0": {1}}, 2)
	ht.kubelet.set(handoff.KubeletPod{Namespace: "default", Name: "p", Containers: map[string][]string{"c0": nil}},
		handoff.KubeletPod{Namespace: "default", Name: "q", Containers: map[string][]string{"c0": nil}})
	dir := t.TempDir()
	spec, err := isolation.NewCDISpec(dir, "/usr/bin/nvidia-cdi-hook", map[int]int64{0: 16384, 1: 16384, 2: 81920})
	if err != nil {
		t.Fatal(err)
	}
	cards := isolationCards(gpushare.IsolationDriver)
	e, err := isolation.NewEnforcer(cards, spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(testLogger(t), ht.h, testCards, gpushare.UnitGiB, StrategyCDICRI, nil)
	s.SetEnforcer(e)
	for _, ids := range [][]string{unitsOn("GPU-0", 0, 4), unitsOn("GPU-1", 0, 2)} {
		if _, err := s.Allocate(ht.ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}); err != nil {
			t.Fatal(err)
		}
	}
	ht.h.DeletePod(q.UID)
	retainIsolation(ht.ctx, ht.h, e, gpushare.UnitGiB, 0)
	got, err := cdiDeviceNames(spec.Path())
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"0-16384", "0-4096", "1-16384", "2-81920"}, got); diff != "" {
		t.Errorf("CDI devices after pod %s left, %s stays (-want +got):\n%s", q.Name, p.Name, diff)
	}
}

// cdiDeviceNames reads the device names of the spec at path with the CDI
// library.
func cdiDeviceNames(path string) ([]string, error) {
	spec, err := cdi.ReadSpec(path, 0)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	return names, nil
}

// TestRetainIsolationMovesTheMPSLimit: the plugin's periodic retain step
// hands mps mode the shares its grants hold, so that an mps card's default
// pinned limit (2 GiB, then 4 GiB as the pods come) goes back down when
// its largest share's pod leaves, and drops to the floor when the card's
// last pod leaves.
func TestRetainIsolationMovesTheMPSLimit(t *testing.T) {
	ht := newHandoffTest(t)
	p := ht.pod(util.MakePod("p").GPUMem(2), map[string][]int{"c0": {0}}, 1)
	q := ht.pod(util.MakePod("q").GPUMem(4), map[string][]int{"c0": {0}}, 2)
	ht.kubelet.set(handoff.KubeletPod{Namespace: "default", Name: "p", Containers: map[string][]string{"c0": nil}},
		handoff.KubeletPod{Namespace: "default", Name: "q", Containers: map[string][]string{"c0": nil}})
	ctx, cancel := context.WithCancel(ht.ctx)
	defer cancel()
	dir := t.TempDir()
	cards := isolationCards(gpushare.IsolationMPS)
	e, err := isolation.NewEnforcer(cards, nil, newFakeMPS(ctx, t, dir))
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(testLogger(t), ht.h, testCards, gpushare.UnitGiB, StrategyEnvvar, nil)
	s.SetEnforcer(e)
	for _, ids := range [][]string{unitsOn("GPU-0", 0, 2), unitsOn("GPU-0", 2, 4)} {
		if _, err := s.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}); err != nil {
			t.Fatal(err)
		}
	}
	commands := filepath.Join(dir, "mps", "GPU-0", "commands")
	retainIsolation(ctx, ht.h, e, gpushare.UnitGiB, 0) // both held: no change
	waitMPSLimits(t, commands, []string{"2048M", "4096M"})
	ht.h.DeletePod(q.UID)
	retainIsolation(ctx, ht.h, e, gpushare.UnitGiB, 0)
	waitMPSLimits(t, commands, []string{"2048M", "4096M", "2048M"})
	ht.h.DeletePod(p.UID)
	retainIsolation(ctx, ht.h, e, gpushare.UnitGiB, 0)
	waitMPSLimits(t, commands, []string{"2048M", "4096M", "2048M", "1M"})
}

// waitMPSLimits waits until the default pinned limits fakeMPSControl
// recorded in commands are want.
func waitMPSLimits(t *testing.T, commands string, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(commands)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if v, ok := strings.CutPrefix(l, "set_default_device_pinned_mem_limit 0 "); ok {
				got = append(got, v)
			}
		}
		if cmp.Equal(want, got) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("default pinned limits of GPU-0 (-want +got):\n%s", cmp.Diff(want, got))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
