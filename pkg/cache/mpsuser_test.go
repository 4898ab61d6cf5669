package cache

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/util"
)

// TestMPSUsers (review S5): on a card in mps mode a pod may only join
// MPS clients of its own Linux user, as the device plugin admits them; the
// extender keeps it off the others instead of sending it where Allocate
// refuses it, again and again. Cards in other modes take anyone.
func TestMPSUsers(t *testing.T) {
	ctx := context.Background()
	c := newCache(t, clocktesting.NewFakeClock(time.Unix(0, 0)))
	node := util.MakeNode("n").Cards("Tesla-T4", 16, 16).Isolation(0, gpushare.IsolationMPS).Isolation(1, gpushare.IsolationNone).Obj()
	if err := c.SetNode(node); err != nil {
		t.Fatal(err)
	}
	on := func(p *util.PodWrapper, index int, units int64) *corev1.Pod {
		pod := boundOn(p.Obj().Name, "n", index, units)
		pod.Spec.SecurityContext = p.Obj().Spec.SecurityContext
		return pod
	}
	c.UpsertPod(on(util.MakePod("a").RunAsUser(1000), 0, 4)) // an MPS client of card 0: 12 GiB free
	c.UpsertPod(on(util.MakePod("b").RunAsUser(2000), 1, 8)) // card 1 is not mps: 8 GiB free
	tests := []struct {
		name   string
		pod    *corev1.Pod
		card   int    // where Assume puts it; -1: it fits no card
		reason string // part of filter's reason when it fits no card
	}{
		{"the same user joins card 0", util.MakePod("same").GPUMem(12).RunAsUser(1000).Obj(), 0, ""},
		{"another user: card 1 only", util.MakePod("other").GPUMem(8).RunAsUser(3000).Obj(), 1, ""},
		{"another user, 12 GiB: no card", util.MakePod("big").GPUMem(12).RunAsUser(3000).Obj(), -1, "MPS clients of another Linux user"},
		{"no runAsUser is another user", util.MakePod("image").GPUMem(12).Obj(), -1, "MPS clients of another Linux user"},
		{"a container on two cards is no MPS client", util.MakePod("wide").GPUMemCards(4, 2).RunAsUser(3000).Obj(), 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := kubeinfo.NewPodInfo(tc.pod)
			fit, failed, err := c.Filter(ctx, pod, []string{"n"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.card < 0 {
				if len(fit) != 0 || !strings.Contains(failed["n"], tc.reason) {
					t.Errorf("Filter = %v, %q; want no fit, because of %q", fit, failed["n"], tc.reason)
				}
				if _, err := c.Assume(ctx, pod, "n"); err == nil {
					t.Error("Assume placed the pod")
					c.Forget(pod.UID)
				}
				return
			}
			if diff := cmp.Diff([]string{"n"}, fit); diff != "" {
				t.Fatalf("Filter (-want +got):\n%s (failed: %v)", diff, failed)
			}
			a, err := c.Assume(ctx, pod, "n")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Forget(pod.UID)
			if _, ok := a.PerCard()[tc.card]; !ok {
				t.Errorf("Assume placed the pod on %v, want card %d among them", a.PerCard(), tc.card)
			}
		})
	}
}
