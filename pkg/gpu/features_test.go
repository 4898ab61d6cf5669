package gpu

import (
	"errors"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/google/go-cmp/cmp"
)

// mockComputeMode gives every card of srv a compute mode that NVML reads
// and sets (dgxa100 leaves both unset).
func mockComputeMode(srv *dgxa100.Server) {
	for _, d := range srv.Devices {
		dev := d.(*dgxa100.Device)
		mode := nvml.COMPUTEMODE_DEFAULT
		dev.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return mode, nvml.SUCCESS }
		dev.SetComputeModeFunc = func(m nvml.ComputeMode) nvml.Return { mode = m; return nvml.SUCCESS }
	}
}

func TestNVMLDriverAndFeatures(t *testing.T) {
	srv := dgxa100.New()
	srv.DriverVersion = "615.00"
	srv.CudaDriverVersion = 13040
	mockComputeMode(srv)
	srv.Devices[1].(*dgxa100.Device).MigMode = nvml.DEVICE_MIG_ENABLE
	srv.Devices[2].(*dgxa100.Device).CudaComputeCapability.Major = 6
	srv.Devices[3].(*dgxa100.Device).GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	n, err := OpenNVML(srv)
	if err != nil {
		t.Fatal(err)
	}
	drv, err := n.Driver()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Driver{Version: "615.00", CUDAVersion: 13040}, drv); diff != "" {
		t.Errorf("Driver() (-want +got):\n%s", diff)
	}
	uuid := func(i int) string { return srv.Devices[i].(*dgxa100.Device).UUID }
	var got []Features
	for i := range 4 {
		f, err := n.Features(uuid(i))
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, f)
	}
	want := []Features{
		{MPS: true},
		{MIG: true, MPS: true},
		{},          // compute capability 6.x: older than Volta
		{MPS: true}, // MIG not supported: off
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Features() (-want +got):\n%s", diff)
	}
	if err := n.SetComputeMode(uuid(0), ComputeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	if f, _ := n.Features(uuid(0)); f.ComputeMode != ComputeExclusiveProcess {
		t.Errorf("compute mode after SetComputeMode = %v, want %v", f.ComputeMode, ComputeExclusiveProcess)
	}
	// A card already in the mode is left alone: an unprivileged plugin
	// (NVML refuses it the change) serves a card the operator prepared.
	srv.Devices[0].(*dgxa100.Device).SetComputeModeFunc = func(nvml.ComputeMode) nvml.Return { return nvml.ERROR_NO_PERMISSION }
	if err := n.SetComputeMode(uuid(0), ComputeExclusiveProcess); err != nil {
		t.Errorf("SetComputeMode to the card's current mode without permission: %v", err)
	}
	if err := n.SetComputeMode(uuid(0), ComputeDefault); !errors.Is(err, nvml.ERROR_NO_PERMISSION) {
		t.Errorf("SetComputeMode to another mode without permission: error = %v, want ERROR_NO_PERMISSION", err)
	}
	if _, err := n.Features("GPU-nope"); err == nil {
		t.Error("Features of an unknown UUID: want an error")
	}
	srv.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
	if _, err := n.Driver(); !errors.Is(err, nvml.ERROR_UNKNOWN) {
		t.Errorf("Driver() with a failing NVML: error = %v, want ERROR_UNKNOWN", err)
	}
}

func TestParseFakeDriver(t *testing.T) {
	tests := []struct {
		spec    string
		want    FakeDriver
		wantErr bool
	}{
		{spec: "", want: FakeDriver{}},
		{spec: "615.00", want: FakeDriver{Driver: Driver{Version: "615.00", CUDAVersion: 13040}}},
		{spec: "550.54.15,mps", want: FakeDriver{Driver: Driver{Version: "550.54.15", CUDAVersion: 12040}, MPS: true}},
		{spec: "615.00,mps,cgroup-v1", want: FakeDriver{Driver: Driver{Version: "615.00", CUDAVersion: 13040}, MPS: true, CgroupV1: true}},
		{spec: "615", wantErr: true},
		{spec: "615.x", wantErr: true},
		{spec: "615.00,mig", wantErr: true},
		{spec: "mps", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			got, err := ParseFakeDriver(tc.spec)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseFakeDriver(%q) error = %v, wantErr %v", tc.spec, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ParseFakeDriver(%q) (-want +got):\n%s", tc.spec, diff)
			}
		})
	}
}

func TestFakeFeatures(t *testing.T) {
	devs, err := ParseFakeGPUs("1xTesla-T4:16GiB,1xA100:80GiB:mig", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if !devs[1].MIG || devs[0].MIG {
		t.Fatalf("MIG of the parsed cards = %v, %v; want false, true", devs[0].MIG, devs[1].MIG)
	}
	f := NewFake(devs)
	if _, err := f.Driver(); !errors.Is(err, ErrNoDriver) {
		t.Errorf("Driver() of a fake node that states none: error = %v, want ErrNoDriver", err)
	}
	f.SetDriver(FakeDriver{Driver: Driver{Version: "550.54.15"}, MPS: true})
	if err := f.SetComputeMode(devs[0].UUID, ComputeExclusiveProcess); err != nil {
		t.Fatal(err)
	}
	got := []Features{}
	for _, d := range devs {
		ft, err := f.Features(d.UUID)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ft)
	}
	want := []Features{{MPS: true, ComputeMode: ComputeExclusiveProcess}, {MIG: true, MPS: true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Features (-want +got):\n%s", diff)
	}
}
