package gpushare

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFirstAppDevice(t *testing.T) {
	share := func(idx int, units int64) []DeviceShare {
		return []DeviceShare{{Index: idx, UUID: "GPU-" + string(rune('a'+idx)), Units: units}}
	}
	tests := []struct {
		name       string
		containers []ContainerAllocation
		want       DeviceShare
		wantOK     bool
	}{
		{"app after init", []ContainerAllocation{
			{Name: "prep", Init: true, Devices: share(1, 8)},
			{Name: "train", Devices: share(2, 4)},
			{Name: "serve", Devices: share(3, 4)},
		}, DeviceShare{Index: 2, UUID: "GPU-c", Units: 4}, true},
		{"first of several devices", []ContainerAllocation{
			{Name: "train", Devices: []DeviceShare{{Index: 3, Units: 8}, {Index: 0, Units: 8}}},
		}, DeviceShare{Index: 3, Units: 8}, true},
		{"init only", []ContainerAllocation{
			{Name: "a", Init: true, Devices: share(0, 2)},
			{Name: "b", Init: true, Devices: share(1, 2)},
		}, DeviceShare{Index: 0, UUID: "GPU-a", Units: 2}, true},
		{"no containers", nil, DeviceShare{}, false},
		{"app without devices", []ContainerAllocation{{Name: "train"}}, DeviceShare{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := &Allocation{Node: "n", Unit: UnitGiB, Containers: tc.containers}
			got, ok := a.FirstAppDevice()
			if ok != tc.wantOK {
				t.Errorf("ok = %v, want %v", ok, tc.wantOK)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("FirstAppDevice (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateBoundsShares: a share over MaxShareUnits is refused, so no
// sum of shares can wrap.
func TestValidateBoundsShares(t *testing.T) {
	for _, tc := range []struct {
		units   int64
		wantErr bool
	}{{MaxShareUnits, false}, {MaxShareUnits + 1, true}, {1<<63 - 1, true}} {
		a := &Allocation{Node: "n", Unit: UnitGiB, Containers: []ContainerAllocation{{Name: "c", Devices: []DeviceShare{{Index: 0, Units: tc.units}}}}}
		if err := a.Validate(); (err != nil) != tc.wantErr {
			t.Errorf("Validate with a share of %d units: %v, want error %v", tc.units, err, tc.wantErr)
		}
	}
}

func TestInUnit(t *testing.T) {
	a := &Allocation{Node: "n", Unit: UnitMiB, Containers: []ContainerAllocation{
		{Name: "c", Devices: []DeviceShare{{Index: 0, Units: 1500}, {Index: 1, Units: 2048}}}}}
	got, err := a.InUnit(UnitGiB)
	if err != nil {
		t.Fatal(err)
	}
	want := &Allocation{Node: "n", Unit: UnitGiB, Containers: []ContainerAllocation{
		{Name: "c", Devices: []DeviceShare{{Index: 0, Units: 2}, {Index: 1, Units: 2}}}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("MiB to GiB (-want +got):\n%s", diff)
	}
	if a.Containers[0].Devices[0].Units != 1500 {
		t.Error("InUnit changed its receiver")
	}
	back, err := got.InUnit(UnitMiB)
	if err != nil {
		t.Fatal(err)
	}
	if u := back.Containers[0].Devices[1].Units; u != 2048 {
		t.Errorf("GiB to MiB: %d, want 2048", u)
	}
	// A share that would pass MaxShareUnits once converted is refused.
	huge := &Allocation{Node: "n", Unit: UnitGiB, Containers: []ContainerAllocation{{Name: "c", Devices: []DeviceShare{{Index: 0, Units: MaxShareUnits}}}}}
	if _, err := huge.InUnit(UnitMiB); err == nil {
		t.Error("converting a share of MaxShareUnits GiB to MiB succeeded")
	}
}

func TestCheckDemand(t *testing.T) {
	d := Demand{{Name: "prep", Init: true, Units: 8, Cards: 1}, {Name: "train", Units: 4, Cards: 2}}
	ok := []ContainerAllocation{
		{Name: "prep", Init: true, Devices: []DeviceShare{{Index: 0, Units: 8}}},
		{Name: "train", Devices: []DeviceShare{{Index: 0, Units: 4}, {Index: 1, Units: 4}}},
	}
	tests := []struct {
		name    string
		mutate  func(c []ContainerAllocation) []ContainerAllocation
		wantErr string
	}{
		{"matches", func(c []ContainerAllocation) []ContainerAllocation { return c }, ""},
		{"missing container", func(c []ContainerAllocation) []ContainerAllocation { return c[:1] }, "names 1 containers; the pod has 2"},
		{"renamed", func(c []ContainerAllocation) []ContainerAllocation { c[1].Name = "x"; return c }, "container 1 is container x; the pod's is container train"},
		{"init flag", func(c []ContainerAllocation) []ContainerAllocation { c[0].Init = false; return c }, "is container prep; the pod's is init container prep"},
		{"cards", func(c []ContainerAllocation) []ContainerAllocation { c[1].Devices = c[1].Devices[:1]; return c }, "gives container train 1 cards; it asks 2"},
		{"units", func(c []ContainerAllocation) []ContainerAllocation { c[1].Devices[1].Units = 9; return c }, "gives container train 9 GiB on card 1; it asks 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := make([]ContainerAllocation, len(ok))
			for i, c := range ok {
				c.Devices = append([]DeviceShare(nil), c.Devices...)
				cs[i] = c
			}
			a := &Allocation{Node: "n", Unit: UnitGiB, Containers: tc.mutate(cs)}
			err := a.CheckDemand(d)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("CheckDemand: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("CheckDemand: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
