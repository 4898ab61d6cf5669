package isolation

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

const (
	drv  = gpushare.IsolationDriver
	mps  = gpushare.IsolationMPS
	none = gpushare.IsolationNone
)

func found(p string) (string, error) { return "/usr/bin/" + filepath.Base(p), nil }

func notFound(p string) (string, error) {
	return "", &os.PathError{Op: "stat", Path: p, Err: os.ErrNotExist}
}

// TestDetectAndChooseOnNVMLMocks detects go-nvml's mock DGX A100 (eight
// Ampere cards, compute capability 8.0) through the NVML adapter, with the
// driver, cgroup version, MIG mode and MPS control binary of each case,
// and chooses a mode per card for every request.
func TestDetectAndChooseOnNVMLMocks(t *testing.T) {
	tests := []struct {
		name     string
		driver   string
		cuda     int
		cgroupV2 bool
		mig      []int // indexes of cards with MIG on
		lookPath func(string) (string, error)
		// want: request -> modes of cards 0..7, or the error.
		want    map[Request][]gpushare.Isolation
		wantErr map[Request]string
	}{
		{
			name: "R615 on cgroup v2: driver everywhere", driver: "615.00", cuda: 13040, cgroupV2: true, lookPath: found,
			want: map[Request][]gpushare.Isolation{
				RequestAuto:   {drv, drv, drv, drv, drv, drv, drv, drv},
				RequestDriver: {drv, drv, drv, drv, drv, drv, drv, drv},
				RequestMPS:    {mps, mps, mps, mps, mps, mps, mps, mps},
				RequestNone:   {none, none, none, none, none, none, none, none},
			},
		},
		{
			name: "a newer driver", driver: "620.10.02", cuda: 13050, cgroupV2: true, lookPath: notFound,
			want: map[Request][]gpushare.Isolation{RequestAuto: {drv, drv, drv, drv, drv, drv, drv, drv}},
			wantErr: map[Request]string{
				RequestMPS: "isolation mps: MPS control binary: stat nvidia-cuda-mps-control: file does not exist",
			},
		},
		{
			name: "R550: MPS at most", driver: "550.54.15", cuda: 12040, cgroupV2: true, lookPath: found,
			want: map[Request][]gpushare.Isolation{RequestAuto: {mps, mps, mps, mps, mps, mps, mps, mps}},
			wantErr: map[Request]string{
				RequestDriver: "isolation driver: driver 550.54.15 < 615.00 required",
			},
		},
		{
			name: "R550 without the MPS control binary: nothing enforced", driver: "550.54.15", cuda: 12040, cgroupV2: true, lookPath: notFound,
			want: map[Request][]gpushare.Isolation{RequestAuto: {none, none, none, none, none, none, none, none}},
			wantErr: map[Request]string{
				RequestDriver: "isolation driver: driver 550.54.15 < 615.00 required",
				RequestMPS:    "isolation mps: MPS control binary: stat nvidia-cuda-mps-control: file does not exist",
			},
		},
		{
			name: "R615 on cgroup v1", driver: "615.00", cuda: 13040, cgroupV2: false, lookPath: found,
			want: map[Request][]gpushare.Isolation{RequestAuto: {mps, mps, mps, mps, mps, mps, mps, mps}},
			wantErr: map[Request]string{
				RequestDriver: "isolation driver: cgroup v1 (v2 required)",
			},
		},
		{
			name: "old driver and cgroup v1: both named", driver: "535.104.05", cuda: 12020, cgroupV2: false, lookPath: found,
			wantErr: map[Request]string{
				RequestDriver: "isolation driver: driver 535.104.05 < 615.00 required; cgroup v1 (v2 required)",
			},
		},
		{
			name: "MIG on two cards: those enforce nothing", driver: "615.00", cuda: 13040, cgroupV2: true, mig: []int{2, 5}, lookPath: found,
			want: map[Request][]gpushare.Isolation{RequestAuto: {drv, drv, none, drv, drv, none, drv, drv}},
			wantErr: map[Request]string{
				RequestDriver: "isolation driver: GPU 2 has MIG on; GPU 5 has MIG on",
				RequestMPS:    "isolation mps: GPU 2 has MIG on; GPU 5 has MIG on",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := dgxa100.New()
			srv.DriverVersion, srv.CudaDriverVersion = tc.driver, tc.cuda
			for _, d := range srv.Devices {
				d.(*dgxa100.Device).GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return nvml.COMPUTEMODE_DEFAULT, nvml.SUCCESS }
			}
			for _, i := range tc.mig {
				srv.Devices[i].(*dgxa100.Device).MigMode = nvml.DEVICE_MIG_ENABLE
			}
			n, err := gpu.OpenNVML(srv)
			if err != nil {
				t.Fatal(err)
			}
			devs, err := n.Devices()
			if err != nil {
				t.Fatal(err)
			}
			caps := Detect(n, FixedCgroups{V2: tc.cgroupV2}, tc.lookPath, "nvidia-cuda-mps-control", devs)
			if caps.Driver.CUDAVersion != tc.cuda {
				t.Errorf("CUDA version = %d, want %d", caps.Driver.CUDAVersion, tc.cuda)
			}
			for _, r := range Requests {
				got, err := Choose(r, &caps)
				if want, ok := tc.wantErr[r]; ok {
					if err == nil || err.Error() != want {
						t.Errorf("Choose(%s) error = %v, want %q", r, err, want)
					}
					continue
				}
				if err != nil {
					t.Errorf("Choose(%s): %v", r, err)
					continue
				}
				if want, ok := tc.want[r]; ok {
					if diff := cmp.Diff(want, got); diff != "" {
						t.Errorf("Choose(%s) (-want +got):\n%s", r, diff)
					}
				}
			}
		})
	}
}

// TestChooseFakeNodes: a fake node that states no driver enforces
// nothing, and refuses an explicit mode naming why.
func TestChooseFakeNodes(t *testing.T) {
	devs, err := gpu.ParseFakeGPUs("1xTesla-T4:16GiB,1xA100:80GiB:mig", "n1")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		driver  string
		r       Request
		want    []gpushare.Isolation
		wantErr string
	}{
		{name: "silent fake, auto", r: RequestAuto, want: []gpushare.Isolation{none, none}},
		{name: "silent fake, driver", r: RequestDriver,
			wantErr: "isolation driver: driver version unknown (fake node states no driver (--fake-driver): no NVIDIA driver); GPU 1 has MIG on"},
		{name: "silent fake, mps", r: RequestMPS,
			wantErr: "isolation mps: driver unknown (fake node states no driver (--fake-driver): no NVIDIA driver); GPU 0 older than Volta (compute capability < 7.0); GPU 1 has MIG on; GPU 1 older than Volta (compute capability < 7.0)"},
		{name: "R615 fake, auto", driver: "615.00", r: RequestAuto, want: []gpushare.Isolation{drv, none}},
		{name: "R550 MPS fake, auto", driver: "550.54.15,mps", r: RequestAuto, want: []gpushare.Isolation{mps, none}},
		{name: "R615 cgroup v1 fake, driver", driver: "615.00,cgroup-v1", r: RequestDriver, wantErr: "isolation driver: cgroup v1 (v2 required); GPU 1 has MIG on"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := gpu.ParseFakeDriver(tc.driver)
			if err != nil {
				t.Fatal(err)
			}
			f := gpu.NewFake(devs)
			f.SetDriver(fd)
			caps := Detect(f, FixedCgroups{V2: !fd.CgroupV1}, found, "nvidia-cuda-mps-control", devs)
			got, err := Choose(tc.r, &caps)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Choose() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Choose() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestWhyNot(t *testing.T) {
	caps := Capabilities{Driver: gpu.Driver{Version: "550.54.15"}, CgroupV2: true, MPSControl: "/usr/bin/nvidia-cuda-mps-control",
		Cards: []CardCapabilities{{Index: 0, Features: gpu.Features{MPS: true}}, {Index: 1, Features: gpu.Features{MIG: true, MPS: true}}}}
	if got, want := WhyNot(&caps, 0, mps), "driver: driver 550.54.15 < 615.00 required"; got != want {
		t.Errorf("WhyNot(card 0) = %q, want %q", got, want)
	}
	if got, want := WhyNot(&caps, 1, none), "driver: driver 550.54.15 < 615.00 required, GPU 1 has MIG on; mps: GPU 1 has MIG on"; got != want {
		t.Errorf("WhyNot(card 1) = %q, want %q", got, want)
	}
	caps.Driver.Version = "615.00"
	if got := WhyNot(&caps, 0, drv); got != "" {
		t.Errorf("WhyNot(strongest) = %q, want empty", got)
	}
}

func TestSysCgroups(t *testing.T) {
	v2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpu memory\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v1 := t.TempDir()
	if err := os.Mkdir(filepath.Join(v1, "memory"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		root    string
		want    bool
		wantErr bool
	}{
		{root: v2, want: true},
		{root: v1, want: false},
		{root: filepath.Join(v1, "absent"), wantErr: true},
	} {
		got, err := SysCgroups{Root: tc.root}.Unified()
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("Unified(%s) = %v, %v; want %v, error %v", tc.root, got, err, tc.want, tc.wantErr)
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Unified(%s) error = %v, want one wrapping ErrNotExist", tc.root, err)
		}
	}
}

func TestParseRequest(t *testing.T) {
	for _, s := range []string{"auto", "driver", "mps", "none"} {
		if r, err := ParseRequest(s); err != nil || string(r) != s {
			t.Errorf("ParseRequest(%q) = %q, %v", s, r, err)
		}
	}
	if _, err := ParseRequest("strict"); err == nil {
		t.Error("ParseRequest(strict): want an error")
	}
}

// TestMPSNeedsTheHost: mps needs the plugin to share /dev/shm with its
// clients, and to be allowed to set a card's compute mode unless the
// operator set EXCLUSIVE_PROCESS already; auto falls back to none naming
// why, an explicit mps fails naming it.
func TestMPSNeedsTheHost(t *testing.T) {
	card := func(i int, mode gpu.ComputeMode) CardCapabilities {
		return CardCapabilities{Index: i, Features: gpu.Features{MPS: true, ComputeMode: mode}}
	}
	base := Capabilities{Driver: gpu.Driver{Version: "550.54.15"}, CgroupV2: true, MPSControl: "/usr/bin/nvidia-cuda-mps-control",
		Cards: []CardCapabilities{card(0, gpu.ComputeDefault), card(1, gpu.ComputeExclusiveProcess)}}
	tests := []struct {
		name    string
		edit    func(*Capabilities)
		want    []gpushare.Isolation
		wantErr string
	}{
		{name: "host ready", edit: func(*Capabilities) {}, want: []gpushare.Isolation{mps, mps}},
		{name: "no CAP_SYS_ADMIN: only the card already exclusive", edit: func(c *Capabilities) { c.ComputeModeLocked = true },
			want:    []gpushare.Isolation{none, mps},
			wantErr: "isolation mps: GPU 0 compute mode Default and no CAP_SYS_ADMIN to set EXCLUSIVE_PROCESS (run nvidia-smi -i 0 -c EXCLUSIVE_PROCESS, or grant the plugin CAP_SYS_ADMIN)"},
		{name: "/dev/shm not shared", edit: func(c *Capabilities) { c.MPSShmErr = errors.New("/dev/shm is not /run/gpushare/mps/shm") },
			want:    []gpushare.Isolation{none, none},
			wantErr: "isolation mps: MPS shared memory: /dev/shm is not /run/gpushare/mps/shm"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.Cards = append([]CardCapabilities(nil), base.Cards...)
			tc.edit(&c)
			got, err := Choose(RequestAuto, &c)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Choose(auto) (-want +got):\n%s", diff)
			}
			_, err = Choose(RequestMPS, &c)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Errorf("Choose(mps) error = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestCheckMPSShm(t *testing.T) {
	root := t.TempDir()
	shm := filepath.Join(root, "shm")
	if err := os.Mkdir(shm, 0o755); err != nil {
		t.Fatal(err)
	}
	shared := filepath.Join(t.TempDir(), "dev-shm")
	if err := os.Symlink(shm, shared); err != nil {
		t.Fatal(err)
	}
	if err := CheckMPSShm(shared, root); err != nil {
		t.Errorf("CheckMPSShm(the same directory) = %v", err)
	}
	other := t.TempDir()
	if err := CheckMPSShm(other, root); err == nil || !strings.Contains(err.Error(), "mount the host's "+shm+" at "+other) {
		t.Errorf("CheckMPSShm(another directory) = %v, want an error saying what to mount", err)
	}
}

func TestSysAdmin(t *testing.T) {
	tests := []struct {
		status string
		want   bool
		err    bool
	}{
		{status: "Name:\tx\nCapEff:\t000001ffffffffff\n", want: true},
		{status: "Name:\tx\nCapEff:\t0000000000200000\n", want: true},  // bit 21 alone
		{status: "Name:\tx\nCapEff:\t00000000a80425fb\n", want: false}, // a container's default set
		{status: "Name:\tx\n", err: true},
		{status: "CapEff:\tzz\n", err: true},
	}
	for _, tc := range tests {
		p := filepath.Join(t.TempDir(), "status")
		if err := os.WriteFile(p, []byte(tc.status), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := SysAdmin(p)
		if tc.err != (err != nil) || got != tc.want {
			t.Errorf("SysAdmin(%q) = %v, %v; want %v, error %v", tc.status, got, err, tc.want, tc.err)
		}
	}
}

// TestCgroupsOf: Setup reads the node's hierarchy at the default root when
// its config names none (the DRA driver's real-GPU test, which builds its
// own SetupConfig, read "" and logged "cgroup version unknown" on an H200
// node), and takes a fake node's version from its driver.
func TestCgroupsOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  SetupConfig
		want Cgroups
	}{
		{"no root", SetupConfig{}, SysCgroups{Root: DefaultCgroupRoot}},
		{"a root", SetupConfig{CgroupRoot: "/host/sys/fs/cgroup"}, SysCgroups{Root: "/host/sys/fs/cgroup"}},
		{"fake, v2", SetupConfig{Fake: true, FakeDriver: "615.00"}, FixedCgroups{V2: true}},
		{"fake, v1", SetupConfig{Fake: true, FakeDriver: "615.00,cgroup-v1", CgroupRoot: "/x"}, FixedCgroups{V2: false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cgroupsOf(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("cgroupsOf (-want +got):\n%s", diff)
			}
		})
	}
	if _, err := cgroupsOf(SetupConfig{Fake: true, FakeDriver: "x.y"}); err == nil {
		t.Error("cgroupsOf with a bad fake driver: nil error, want one")
	}
}
