package cache

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/util"
)

// TestCatchUp: a quorum-listed pod bound by another replica is charged
// whatever the lagging informer delivers after it, and an informer event
// newer than the list wins over it.
func TestCatchUp(t *testing.T) {
	pending := func(rv string) *kubeinfo.PodInfo {
		p := util.MakePod("a").UID("uid-a").GPUMem(16).Obj()
		p.ResourceVersion = rv
		return kubeinfo.NewPodInfo(p)
	}
	bound := func(rv string) *kubeinfo.PodInfo {
		p := util.MakePod("a").UID("uid-a").GPUMem(16).Node("n1").Allocation(&gpushare.Allocation{Node: "n1", Unit: "GiB",
			Containers: []gpushare.ContainerAllocation{{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 0, Units: 16}}}}}).Obj()
		p.ResourceVersion = rv
		return kubeinfo.NewPodInfo(p)
	}
	type step struct {
		informer *kubeinfo.PodInfo // an informer add or update
		quorum   *kubeinfo.PodInfo // applied by the latest catch-up, or by catch-up `of`
		delete   bool              // an informer delete of pod a
		begin    bool              // BeginCatchUp
		end      bool              // EndCatchUp of the latest catch-up, or of catch-up `of`
		of       int               // 1: the first catch-up begun, 2: the second...
	}
	for _, tc := range []struct {
		name  string
		steps []step
		want  []int64 // card Used after the steps
		// wantFloors: pods whose stale informer events are still ignored
		wantFloors int
	}{
		{name: "the lagging informer's stale pending event does not release the card",
			steps: []step{{informer: pending("5")}, {begin: true}, {quorum: bound("10")}, {end: true}, {informer: pending("5")}},
			want:  []int64{16}, wantFloors: 1},
		{name: "the informer's own bound event then clears the floor",
			steps: []step{{begin: true}, {quorum: bound("10")}, {end: true}, {informer: bound("10")}},
			want:  []int64{16}, wantFloors: 0},
		{name: "a delete the informer applied during the catch-up wins over the list",
			steps: []step{{begin: true}, {delete: true}, {quorum: bound("10")}, {end: true}},
			want:  []int64{0}},
		{name: "a newer finished event during the catch-up wins over the list",
			steps: []step{{begin: true}, {informer: func() *kubeinfo.PodInfo { p := bound("12"); p.Phase = corev1.PodSucceeded; return p }()}, {quorum: bound("10")}, {end: true}},
			want:  []int64{0}},
		{name: "a later delete releases the card",
			steps: []step{{begin: true}, {quorum: bound("10")}, {end: true}, {delete: true}},
			want:  []int64{0}},
		{name: "a flap: the first term's late end leaves the second's guard, so a delete still wins over its list",
			steps: []step{{begin: true}, {begin: true}, {end: true, of: 1}, {delete: true}, {quorum: bound("10")}, {end: true}},
			want:  []int64{0}},
		{name: "a replaced catch-up applies nothing more",
			steps: []step{{begin: true}, {begin: true}, {quorum: bound("10"), of: 1}, {end: true}},
			want:  []int64{0}},
		{name: "without a catch-up the stale event is all there is",
			steps: []step{{informer: pending("5")}},
			want:  []int64{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCache(t, clocktesting.NewFakeClock(time.Unix(1000, 0)))
			if err := c.SetNode(util.MakeNode("n1").Cards("T4", 16).Obj()); err != nil {
				t.Fatal(err)
			}
			var cus []*CatchUp // in the order begun
			which := func(s step) *CatchUp {
				if s.of > 0 {
					return cus[s.of-1]
				}
				return cus[len(cus)-1]
			}
			for _, s := range tc.steps {
				switch {
				case s.begin:
					cus = append(cus, c.BeginCatchUp())
				case s.end:
					c.EndCatchUp(which(s))
				case s.quorum != nil:
					c.ApplyQuorum(which(s), s.quorum)
				case s.informer != nil:
					c.UpsertPodInfo(s.informer)
				case s.delete:
					c.DeletePod("uid-a")
				}
			}
			if diff := cmp.Diff(tc.want, used(t, c, "n1")); diff != "" {
				t.Errorf("card Used (-want +got):\n%s", diff)
			}
			c.mu.Lock()
			floors := len(c.floor)
			c.mu.Unlock()
			if floors != tc.wantFloors {
				t.Errorf("%d floors left, want %d", floors, tc.wantFloors)
			}
			// A second 16 GiB pod fits exactly where nothing is charged.
			_, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(util.MakePod("b").UID("uid-b").GPUMem(16).Obj()), "n1")
			if fits := err == nil; fits != (tc.want[0] == 0) {
				t.Errorf("Assume(b) = %v; the card holds %d", err, tc.want[0])
			}
		})
	}
}
