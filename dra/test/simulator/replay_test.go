package simulator

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	gocmp "github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/dra/pkg/devices"
	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/simulator"
)

// classes lists the driver's one DeviceClass.
type classes struct{}

func (classes) List() ([]*resourceapi.DeviceClass, error) {
	return []*resourceapi.DeviceClass{devices.DeviceClass()}, nil
}

func (classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if name != devices.DeviceClassName {
		return nil, fmt.Errorf("no DeviceClass %s", name)
	}
	return devices.DeviceClass(), nil
}

// draChoice asks DRA's own allocator, as kube-scheduler 1.37 runs it, for
// the cards of d (one container: units on one card, or whole cards) on a
// node with cards, published by the driver's code in order (the cards'
// positions in it), and returns their indexes, sorted; nil when it
// allocates nothing.
func draChoice(t *testing.T, cards []allocator.Card, order []int, d gpushare.ContainerDemand) []int {
	t.Helper()
	var dc []devices.Card
	for _, pos := range order {
		c := cards[pos]
		dc = append(dc, devices.Card{Card: gpushare.Card{Index: c.Index, UUID: fmt.Sprintf("GPU-%d", c.Index), Model: "T4", MemoryMiB: c.Total << 10}, CapacityMiB: c.Total << 10, Isolation: gpushare.IsolationNone})
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "n-gpu.gpushare.io"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: devices.DriverName, NodeName: ptr.To("n"),
			Pool:    resourceapi.ResourcePool{Name: "n", Generation: 1, ResourceSliceCount: 1},
			Devices: devices.List(dc, devices.OrderIndex, devices.Info{Unit: gpushare.UnitGiB}),
		},
	}
	// Devices lists them by index; put them back in the given order.
	byName := map[string]resourceapi.Device{}
	for _, dev := range slice.Spec.Devices {
		byName[dev.Name] = dev
	}
	slice.Spec.Devices = slice.Spec.Devices[:0]
	for _, c := range dc {
		slice.Spec.Devices = append(slice.Spec.Devices, byName[c.DeviceName()])
	}
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, c := range cards {
		if c.Used == 0 {
			continue
		}
		id := structured.MakeDeviceID(devices.DriverName, "n", fmt.Sprintf("gpu-%d", c.Index))
		share := types.UID(fmt.Sprintf("share-%d", c.Index))
		state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, &share))
		state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, map[resourceapi.QualifiedName]resource.Quantity{
			devices.CapacityMemory: *resource.NewQuantity(c.Used<<30, resource.BinarySI),
		}))
	}
	req := resourceapi.ExactDeviceRequest{DeviceClassName: devices.DeviceClassName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: int64(d.Cards)}
	if d.Cards == 1 {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			devices.CapacityMemory: *resource.NewQuantity(d.Units<<30, resource.BinarySI),
		}}
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "c", UID: "claim"},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}}}},
	}
	ctx := context.Background()
	a, err := structured.NewAllocator(ctx, structured.Features{ConsumableCapacity: true}, state, classes{}, []*resourceapi.ResourceSlice{slice},
		cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := a.Allocate(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}, []*resourceapi.ResourceClaim{claim})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) == 0 {
		return nil
	}
	var out []int
	for _, r := range res[0].Devices.Results {
		var idx int
		if _, err := fmt.Sscanf(r.Device, "gpu-%d", &idx); err != nil {
			t.Fatal(err)
		}
		out = append(out, idx)
	}
	slices.Sort(out)
	return out
}

// TestDRAReplayMatchesAllocator: for random nodes and claims, the card
// the replay's DRA policy takes (allocator.FitWith with its CardKey) is
// the one DRA's own allocator takes from the slice the driver publishes
// in that order: shares of one card, and whole cards (count k, each card's
// default request: all of it).
func TestDRAReplayMatchesAllocator(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	sizes := []int64{16, 24, 32, 80}
	for i := range 300 {
		n := &allocator.Node{Name: "n", Unit: gpushare.UnitGiB}
		for j := range 1 + rng.IntN(8) {
			total := sizes[rng.IntN(len(sizes))]
			used := int64(0)
			if rng.IntN(3) > 0 {
				used = rng.Int64N(total + 1)
			}
			n.Cards = append(n.Cards, allocator.Card{Index: j, Total: total, Used: used, Healthy: true})
		}
		d := gpushare.ContainerDemand{Name: "c", Units: 1 + rng.Int64N(24), Cards: 1}
		if rng.IntN(4) == 0 {
			d.Cards = 1 + rng.IntN(len(n.Cards))
			d.Units = n.Cards[0].Total
		}
		order := simulator.DRAOrders[rng.IntN(len(simulator.DRAOrders))]
		t.Run(fmt.Sprintf("%d-%s", i, order), func(t *testing.T) {
			if d.Cards > 1 {
				// Whole cards of one size: DRA's default request is each
				// card's whole memory, the replay's the demand's units.
				for j := range n.Cards {
					n.Cards[j].Total = d.Units
					n.Cards[j].Used = min(n.Cards[j].Used, d.Units)
				}
			}
			p := simulator.DRAPolicy(allocator.Binpack{}, &simulator.DRA{Order: order, NodeChoice: simulator.DRANodeExtender})
			var want []int
			pl := &allocator.Placement{}
			if err := allocator.FitWith(n, gpushare.Demand{d}, nil, p, pl); err == nil {
				for _, pos := range pl.Cards[0] {
					want = append(want, n.Cards[pos].Index)
				}
				slices.Sort(want)
			}
			// The slice in this order: as the driver publishes it
			// (devices.List), or for fullest-first, which the driver does
			// not have, sorted by free memory as it would republish it
			// for this state.
			positions := slicePositions(n.Cards, order)
			got := draChoice(t, n.Cards, positions, d)
			if diff := gocmp.Diff(want, got); diff != "" {
				t.Errorf("cards %+v, demand %d GiB on %d card(s), order %s: replay vs DRA's allocator (-replay +allocator):\n%s", n.Cards, d.Units, d.Cards, order, diff)
			}
		})
	}
}

// slicePositions returns the positions of cards in the order of the slice
// the driver publishes with order; fullest-first sorts by free memory,
// ties by position.
func slicePositions(cards []allocator.Card, order simulator.DRAOrder) []int {
	positions := make([]int, len(cards))
	for j := range positions {
		positions[j] = j
	}
	if order == simulator.DRAOrderFullestFirst {
		slices.SortStableFunc(positions, func(a, b int) int { return cmp.Compare(cards[a].Free(), cards[b].Free()) })
		return positions
	}
	byIndex := map[int]int{}
	dc := make([]devices.Card, len(cards))
	for j, c := range cards {
		byIndex[c.Index] = j
		dc[j] = devices.Card{Card: gpushare.Card{Index: c.Index}, CapacityMiB: c.Total << 10}
	}
	positions = positions[:0]
	for _, dev := range devices.List(dc, devices.Order(order), devices.Info{Unit: gpushare.UnitGiB}) {
		var idx int
		if _, err := fmt.Sscanf(dev.Name, "gpu-%d", &idx); err != nil {
			panic(err)
		}
		positions = append(positions, byIndex[idx])
	}
	return positions
}
