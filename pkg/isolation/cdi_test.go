package isolation

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

func TestCDISpec(t *testing.T) {
	dir := t.TempDir()
	s, err := NewCDISpec(dir, "/usr/local/bin/nvidia-cdi-hook", map[int]int64{0: 16384, 1: 81920})
	if err != nil {
		t.Fatal(err)
	}
	one, err := s.Device([]Limit{{Index: 1, MiB: 8192}})
	if err != nil {
		t.Fatal(err)
	}
	two, err := s.Device([]Limit{{Index: 0, MiB: 4096}, {Index: 1, MiB: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := s.Device([]Limit{{Index: 1, MiB: 8192}}); again != one {
		t.Errorf("the same limit again = %s, want %s", again, one)
	}
	if diff := cmp.Diff([]string{"gpushare.io/gpu-mem=1-8192", "gpushare.io/gpu-mem=0-4096_1-4096"}, []string{one, two}); diff != "" {
		t.Errorf("device names (-want +got):\n%s", diff)
	}
	// The CDI library reads the file, resolves the devices and applies
	// their edits: the hook and the limits in MiB.
	spec, err := cdi.ReadSpec(filepath.Join(dir, CDISpecFile), 0)
	if err != nil {
		t.Fatalf("the CDI library rejects the spec: %v", err)
	}
	var names []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	if diff := cmp.Diff([]string{"0-16384", "0-4096_1-4096", "1-8192", "1-81920"}, names); diff != "" {
		t.Errorf("spec devices (-want +got):\n%s", diff)
	}
	d := spec.GetDevice("0-4096_1-4096")
	if d == nil {
		t.Fatal("device 0-4096_1-4096 missing")
	}
	if diff := cmp.Diff([]string{"NVIDIA_GPU_MEMORY_REQUEST=4096,4096", "NVIDIA_GPU_MEMORY_LIMIT=4096,4096"}, d.ContainerEdits.Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
	h := d.ContainerEdits.Hooks
	if len(h) != 1 || h[0].HookName != "createContainer" || h[0].Path != "/usr/local/bin/nvidia-cdi-hook" ||
		strings.Join(h[0].Args, " ") != "nvidia-cdi-hook apply-cuda-memory-limits" {
		t.Errorf("hooks = %+v, want the toolkit's apply-cuda-memory-limits at createContainer", h)
	}

	// A restarted plugin keeps the devices of running containers.
	s2, err := NewCDISpec(dir, "/usr/local/bin/nvidia-cdi-hook", map[int]int64{0: 16384})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s2.devices["0-4096_1-4096"]; !ok {
		t.Error("restart dropped device 0-4096_1-4096")
	}
}

func TestCDISpecRejectsInvalid(t *testing.T) {
	dir := t.TempDir()
	// A hook without a path fails the CDI library's validation, and
	// nothing is written.
	if _, err := NewCDISpec(dir, "", map[int]int64{0: 16384}); err == nil || !strings.Contains(err.Error(), "validating the CDI spec") {
		t.Fatalf("NewCDISpec with an empty hook path: error = %v, want a validation error", err)
	}
	if _, err := os.Stat(filepath.Join(dir, CDISpecFile)); !os.IsNotExist(err) {
		t.Errorf("spec file after a failed validation: stat error = %v, want not exist", err)
	}
}

func TestFraction(t *testing.T) {
	for _, tc := range []struct {
		part, whole int64
		want        string
	}{{4096, 16384, "0.25"}, {5000, 15360, "0.3255"}, {16384, 16384, "1"}, {1, 81920, "0"}, {1, 0, "0"}} {
		if got := fraction(tc.part, tc.whole); got != tc.want {
			t.Errorf("fraction(%d, %d) = %q, want %q", tc.part, tc.whole, got, tc.want)
		}
	}
}

// TestCDISpecRetain: pruning drops the limit devices no container holds
// any more, keeps the held ones, the whole-card devices and those added
// within minAge (an Allocate may be adding one while the plugin decides
// what is held), and rewrites a spec the CDI library still accepts.
func TestCDISpecRetain(t *testing.T) {
	dir := t.TempDir()
	s, err := NewCDISpec(dir, "/usr/bin/nvidia-cdi-hook", map[int]int64{0: 16384})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1700000000, 0)
	s.now = func() time.Time { return now }
	for _, l := range [][]Limit{{{Index: 0, MiB: 4096}}, {{Index: 0, MiB: 2048}}, {{Index: 0, MiB: 1024}, {Index: 1, MiB: 1024}}} {
		if _, err := s.Device(l); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(time.Minute)
	if _, err := s.Device([]Limit{{Index: 1, MiB: 512}}); err != nil { // fresh
		t.Fatal(err)
	}
	held := [][]Limit{{{Index: 0, MiB: 4096}}}
	removed, err := s.Retain(held, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if removed != 2 {
		t.Errorf("Retain removed %d devices, want 2", removed)
	}
	spec, err := cdi.ReadSpec(filepath.Join(dir, CDISpecFile), 0)
	if err != nil {
		t.Fatalf("the CDI library rejects the pruned spec: %v", err)
	}
	var names []string
	for _, d := range spec.Devices {
		names = append(names, d.Name)
	}
	if diff := cmp.Diff([]string{"0-16384", "0-4096", "1-512"}, names); diff != "" {
		t.Errorf("devices after pruning (-want +got):\n%s", diff)
	}
	// Nothing to drop: the file is left alone.
	if removed, err := s.Retain(held, 30*time.Second); err != nil || removed != 0 {
		t.Errorf("Retain again = %d, %v; want 0, nil", removed, err)
	}
}

// TestCDISpecTempFileHidden: between writing the next spec and renaming it
// over the current one, both files are in the directory runtimes scan. A
// runtime's CDI cache that rescans then must still resolve every device:
// the temporary file must be one it skips, not a second spec defining the
// same devices (which it refuses as a conflict).
func TestCDISpecTempFileHidden(t *testing.T) {
	dir := t.TempDir()
	s, err := NewCDISpec(dir, "/usr/local/bin/nvidia-cdi-hook", map[int]int64{0: 16384})
	if err != nil {
		t.Fatal(err)
	}
	name, err := s.Device([]Limit{{Index: 0, MiB: 4096}})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := os.ReadFile(filepath.Join(dir, CDISpecFile))
	if err != nil {
		t.Fatal(err)
	}
	// The moment before the rename: the next spec (here the same devices)
	// at the temporary path.
	tmp := tempSpecPath(filepath.Join(dir, CDISpecFile))
	if filepath.Dir(tmp) != dir {
		t.Fatalf("temporary spec %s is not beside %s: the rename would cross directories", tmp, dir)
	}
	if err := os.WriteFile(tmp, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ValidateCDISpecFile(tmp); err != nil {
		t.Fatalf("the temporary spec cannot be validated where it is written: %v", err)
	}
	runtime, err := cdi.NewCache(cdi.WithSpecDirs(dir), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatalf("a runtime's CDI cache over %s: %v", dir, err)
	}
	if errs := runtime.GetErrors(); len(errs) > 0 {
		t.Errorf("a runtime's CDI cache reports %v while the next spec waits at %s", errs, tmp)
	}
	if runtime.GetDevice(name) == nil {
		t.Errorf("a runtime's CDI cache cannot resolve %s while the next spec waits at %s (devices: %v)", name, tmp, runtime.ListDevices())
	}
}
