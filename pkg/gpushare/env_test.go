package gpushare

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestContainerEnv(t *testing.T) {
	for _, tc := range []struct {
		name              string
		shares            []EnvShare
		podUnits, devUnit int64
		unit              string
		want              map[string]string
	}{{
		name:     "two cards in GiB",
		shares:   []EnvShare{{UUID: "GPU-a", Index: 1, Units: 8}, {UUID: "GPU-b", Index: 3, Units: 4}},
		podUnits: 12, devUnit: 16, unit: UnitGiB,
		want: map[string]string{
			EnvVisibleDevices: "GPU-a,GPU-b", AnnotationIndex: "1,3", EnvContainerMem: "12",
			AnnotationPodMem: "12", AnnotationDevMem: "16", EnvMPSLimit: "0=8G,1=4G",
		},
	}, {
		name:     "one card in MiB, pod holds more than the container",
		shares:   []EnvShare{{UUID: "GPU-c", Index: 0, Units: 5000}},
		podUnits: 7000, devUnit: 15360, unit: UnitMiB,
		want: map[string]string{
			EnvVisibleDevices: "GPU-c", AnnotationIndex: "0", EnvContainerMem: "5000",
			AnnotationPodMem: "7000", AnnotationDevMem: "15360", EnvMPSLimit: "0=5000M",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := ContainerEnv(tc.shares, tc.podUnits, tc.devUnit, tc.unit)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ContainerEnv (-want +got):\n%s", diff)
			}
		})
	}
}
