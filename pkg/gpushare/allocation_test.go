package gpushare

import (
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
		a := &Allocation{Node: "n", Containers: []ContainerAllocation{{Name: "c", Devices: []DeviceShare{{Index: 0, Units: tc.units}}}}}
		if err := a.Validate(); (err != nil) != tc.wantErr {
			t.Errorf("Validate with a share of %d units: %v, want error %v", tc.units, err, tc.wantErr)
		}
	}
}
