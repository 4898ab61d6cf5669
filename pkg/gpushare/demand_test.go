package gpushare

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func container(name string, limits, requests map[corev1.ResourceName]string) corev1.Container {
	c := corev1.Container{Name: name}
	if limits != nil {
		c.Resources.Limits = corev1.ResourceList{}
		for r, v := range limits {
			c.Resources.Limits[r] = resource.MustParse(v)
		}
	}
	if requests != nil {
		c.Resources.Requests = corev1.ResourceList{}
		for r, v := range requests {
			c.Resources.Requests[r] = resource.MustParse(v)
		}
	}
	return c
}

func TestPodDemand(t *testing.T) {
	mem := func(v string) map[corev1.ResourceName]string {
		return map[corev1.ResourceName]string{ResourceGPUMem: v}
	}
	always := corev1.ContainerRestartPolicyAlways
	sidecar := container("side", mem("2"), nil)
	sidecar.RestartPolicy = &always
	tests := []struct {
		name      string
		init      []corev1.Container
		apps      []corev1.Container
		want      Demand
		wantTotal int64
		wantErr   string
	}{
		{
			name:      "one container",
			apps:      []corev1.Container{container("c", mem("8"), mem("8"))},
			want:      Demand{{Name: "c", Units: 8, Cards: 1}},
			wantTotal: 8,
		},
		{
			name: "init, sidecar and apps: max(init, apps + sidecar)",
			init: []corev1.Container{container("prep", mem("8"), nil), sidecar},
			apps: []corev1.Container{container("a", mem("4"), nil), container("plain", nil, nil), container("b", mem("3"), nil)},
			want: Demand{
				{Name: "prep", Init: true, Units: 8, Cards: 1},
				{Name: "side", Units: 2, Cards: 1},
				{Name: "a", Units: 4, Cards: 1},
				{Name: "b", Units: 3, Cards: 1},
			},
			wantTotal: 9,
		},
		{
			// kubelet keeps a sidecar's devices out of the pool later
			// containers reuse, so a plain init container after it runs
			// beside it: max(side + prep, side + app) = max(2+8, 2+3).
			name: "sidecar before a plain init container",
			init: []corev1.Container{sidecar, container("prep", mem("8"), nil)},
			apps: []corev1.Container{container("a", mem("3"), nil)},
			want: Demand{
				{Name: "side", Units: 2, Cards: 1},
				{Name: "prep", Init: true, Units: 8, Cards: 1},
				{Name: "a", Units: 3, Cards: 1},
			},
			wantTotal: 10,
		},
		{
			name:      "multi-card",
			apps:      []corev1.Container{container("c", map[corev1.ResourceName]string{ResourceGPUMem: "32", ResourceGPUCount: "2"}, nil)},
			want:      Demand{{Name: "c", Units: 16, Cards: 2}},
			wantTotal: 32,
		},
		{
			name:      "request only",
			apps:      []corev1.Container{container("c", nil, mem("5"))},
			want:      Demand{{Name: "c", Units: 5, Cards: 1}},
			wantTotal: 5,
		},
		{name: "no gpu", apps: []corev1.Container{container("c", nil, nil)}, wantErr: "pod asks no aliyun.com/gpu-mem"},
		{name: "zero", apps: []corev1.Container{container("c", mem("0"), nil)}, wantErr: `container "c": aliyun.com/gpu-mem is 0; want a positive whole number of units`},
		{name: "fraction", apps: []corev1.Container{container("c", mem("1500m"), nil)}, wantErr: `container "c": aliyun.com/gpu-mem is 1500m; want a positive whole number of units`},
		{name: "request differs", apps: []corev1.Container{container("c", mem("4"), mem("2"))}, wantErr: `container "c": aliyun.com/gpu-mem request 2 differs from limit 4; extended resources need request == limit`},
		{
			name:    "indivisible",
			apps:    []corev1.Container{container("c", map[corev1.ResourceName]string{ResourceGPUMem: "5", ResourceGPUCount: "2"}, nil)},
			wantErr: `container "c": aliyun.com/gpu-mem 5 is not divisible by aliyun.com/gpu-count 2; each card gets an equal share`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{Spec: corev1.PodSpec{InitContainers: tc.init, Containers: tc.apps}}
			got, err := PodDemand(pod)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("PodDemand() error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("PodDemand() (-want +got):\n%s", diff)
			}
			if got.Total() != tc.wantTotal {
				t.Errorf("Total() = %d, want %d", got.Total(), tc.wantTotal)
			}
		})
	}
	if _, err := PodDemand(nil); err == nil {
		t.Error("PodDemand(nil) succeeded")
	}
}

func TestAllocationPerCard(t *testing.T) {
	a := &Allocation{Node: "n", Containers: []ContainerAllocation{
		{Name: "prep", Init: true, Devices: []DeviceShare{{Index: 1, Units: 8}}},
		{Name: "train", Devices: []DeviceShare{{Index: 1, Units: 4}}},
		{Name: "serve", Devices: []DeviceShare{{Index: 3, Units: 4}}},
	}}
	if diff := cmp.Diff(map[int]int64{1: 8, 3: 4}, a.PerCard()); diff != "" {
		t.Errorf("PerCard (-want +got):\n%s", diff)
	}
	if a.Total() != 12 {
		t.Errorf("Total() = %d, want 12", a.Total())
	}
}

// TestAllocationPerCardSidecars: a plain init container runs beside the
// sidecars declared before it, on their cards, as kubelet keeps sidecar
// devices out of the reuse pool; sidecars declared after it do not count.
func TestAllocationPerCardSidecars(t *testing.T) {
	share := func(idx int, units int64) []DeviceShare { return []DeviceShare{{Index: idx, Units: units}} }
	tests := []struct {
		name       string
		containers []ContainerAllocation
		want       map[int]int64
	}{
		{"sidecar then init on one card", []ContainerAllocation{
			{Name: "side", Devices: share(0, 4)},
			{Name: "prep", Init: true, Devices: share(0, 8)},
			{Name: "app", Devices: share(0, 2)},
		}, map[int]int64{0: 12}},
		{"init then sidecar", []ContainerAllocation{
			{Name: "prep", Init: true, Devices: share(0, 8)},
			{Name: "side", Devices: share(0, 4)},
			{Name: "app", Devices: share(0, 2)},
		}, map[int]int64{0: 8}},
		{"sidecar on another card", []ContainerAllocation{
			{Name: "side", Devices: share(1, 4)},
			{Name: "prep", Init: true, Devices: share(0, 8)},
			{Name: "app", Devices: share(0, 2)},
		}, map[int]int64{0: 8, 1: 4}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := &Allocation{Node: "n", Containers: tc.containers}
			if diff := cmp.Diff(tc.want, a.PerCard()); diff != "" {
				t.Errorf("PerCard (-want +got):\n%s", diff)
			}
		})
	}
}
