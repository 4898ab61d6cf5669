package handoff

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/util"
)

// TestRunAsUsers: a container's user is its own runAsUser, else its
// pod's, else unknown (absent).
func TestRunAsUsers(t *testing.T) {
	tests := []struct {
		name string
		pod  *util.PodWrapper
		want map[string]int64
	}{
		{name: "neither sets one", pod: util.MakePod("p").GPUMem(4), want: map[string]int64{}},
		{name: "the pod's", pod: util.MakePod("p").RunAsUser(1000).InitGPUMem(2).GPUMem(4), want: map[string]int64{"i0": 1000, "c0": 1000}},
		{name: "the container's over the pod's", pod: util.MakePod("p").RunAsUser(1000).GPUMem(4).ContainerRunAsUser(0).GPUMem(2),
			want: map[string]int64{"c0": 0, "c1": 1000}},
		{name: "the container's alone", pod: util.MakePod("p").GPUMem(4).ContainerRunAsUser(7).GPUMem(2), want: map[string]int64{"c0": 7}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, runAsUsers(tc.pod.Obj())); diff != "" {
				t.Errorf("runAsUsers (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAllocateRefusesMixedMPSUsers: a container that would join MPS
// clients of another Linux user on its card (which would hang at CUDA
// init) is refused at Allocate, naming both pods, their users, the card
// and the fix, and holds nothing; the same users, another card, a card
// not in mps mode, a container on several cards (which runs without MPS)
// and a plain init container that has run are no conflict. A pod whose
// users the plugin cannot see (no runAsUser) is a user of its own.
func TestAllocateRefusesMixedMPSUsers(t *testing.T) {
	// Cards 0 and 1 in mps mode, card 2 in driver mode.
	cards := slices.Clone(testCards)
	cards[0].Isolation, cards[1].Isolation, cards[2].Isolation = gpushare.IsolationMPS, gpushare.IsolationMPS, gpushare.IsolationDriver
	tests := []struct {
		name string
		// first runs on firstCards (container -> card indexes, its
		// containers allocated init first); second's container c0 then
		// asks secondCards. Every container has 4 units on each card.
		first       *util.PodWrapper
		firstCards  map[string][]int
		second      *util.PodWrapper
		secondCards []int
		wantErr     string
	}{
		{name: "same runAsUser",
			first: util.MakePod("a").RunAsUser(1000).GPUMem(4), firstCards: map[string][]int{"c0": {0}},
			second: util.MakePod("b").RunAsUser(1000).GPUMem(4), secondCards: []int{0}},
		{name: "same user, one from the container and one from the pod",
			first: util.MakePod("a").GPUMem(4).ContainerRunAsUser(1000), firstCards: map[string][]int{"c0": {0}},
			second: util.MakePod("b").RunAsUser(0).GPUMem(4).ContainerRunAsUser(1000), secondCards: []int{0}},
		{name: "neither sets one: the plugin cannot tell, and lets them share",
			first: util.MakePod("a").GPUMem(4), firstCards: map[string][]int{"c0": {0}},
			second: util.MakePod("b").GPUMem(4), secondCards: []int{0}},
		{name: "different users refused",
			first: util.MakePod("a").RunAsUser(0).GPUMem(4), firstCards: map[string][]int{"c0": {0}},
			second: util.MakePod("b").RunAsUser(1000).GPUMem(4), secondCards: []int{0},
			wantErr: "another Linux user's MPS clients hold the card: pod default/b container c0 (runAsUser 1000) cannot share MPS card 0 (GPU-0) " +
				"with pod default/a container c0 (runAsUser 0): an MPS server serves one Linux user at a time, so the container would hang at CUDA init " +
				"until every other client of the card exits; give the pods that share mps cards the same securityContext.runAsUser, or let this pod run on another card"},
		{name: "a known user after an unknown one refused",
			first: util.MakePod("a").GPUMem(4), firstCards: map[string][]int{"c0": {0}},
			second: util.MakePod("b").RunAsUser(1000).GPUMem(4), secondCards: []int{0},
			wantErr: "another Linux user's MPS clients hold the card: pod default/b container c0 (runAsUser 1000) cannot share MPS card 0 (GPU-0) " +
				"with pod default/a container c0 (no runAsUser: its image's user): an MPS server serves one Linux user at a time, so the container would hang at CUDA init " +
				"until every other client of the card exits; give the pods that share mps cards the same securityContext.runAsUser, or let this pod run on another card"},
		{name: "an unknown user after a known one refused",
			first: util.MakePod("a").RunAsUser(0).GPUMem(4), firstCards: map[string][]int{"c0": {0}},
			second: util.MakePod("b").GPUMem(4), secondCards: []int{0},
			wantErr: "another Linux user's MPS clients hold the card: pod default/b container c0 (no runAsUser: its image's user) cannot share MPS card 0 (GPU-0) " +
				"with pod default/a container c0 (runAsUser 0): an MPS server serves one Linux user at a time, so the container would hang at CUDA init " +
				"until every other client of the card exits; give the pods that share mps cards the same securityContext.runAsUser, or let this pod run on another card"},
		{name: "different users on different mps cards",
			first: util.MakePod("a").RunAsUser(0).GPUMem(4), firstCards: map[string][]int{"c0": {0}},
			second: util.MakePod("b").RunAsUser(1000).GPUMem(4), secondCards: []int{1}},
		{name: "different users on a driver card",
			first: util.MakePod("a").RunAsUser(0).GPUMem(4), firstCards: map[string][]int{"c0": {2}},
			second: util.MakePod("b").RunAsUser(1000).GPUMem(4), secondCards: []int{2}},
		{name: "a container on two mps cards is no MPS client",
			first: util.MakePod("a").RunAsUser(0).GPUMem(4), firstCards: map[string][]int{"c0": {0}},
			second: util.MakePod("b").RunAsUser(1000).GPUMemCards(8, 2), secondCards: []int{0, 1}},
		{name: "a plain init container has run to completion",
			first: util.MakePod("a").RunAsUser(0).InitGPUMem(4).GPUMem(4), firstCards: map[string][]int{"i0": {0}, "c0": {1}},
			second: util.MakePod("b").RunAsUser(1000).GPUMem(4), secondCards: []int{0}},
		{name: "a sidecar is a client",
			first: util.MakePod("a").RunAsUser(0).SidecarGPUMem(4).GPUMem(4), firstCards: map[string][]int{"i0": {0}, "c0": {1}},
			second: util.MakePod("b").RunAsUser(1000).GPUMem(4), secondCards: []int{0},
			wantErr: "another Linux user's MPS clients hold the card: pod default/b container c0 (runAsUser 1000) cannot share MPS card 0 (GPU-0) " +
				"with pod default/a container i0 (runAsUser 0): an MPS server serves one Linux user at a time, so the container would hang at CUDA init " +
				"until every other client of the card exits; give the pods that share mps cards the same securityContext.runAsUser, or let this pod run on another card"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ht := newHandoffTest(t)
			ht.h = New(Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: cards, Kubelet: ht.kubelet, Clock: ht.clock})
			a := ht.pod(tc.first, tc.firstCards, 1)
			b := ht.pod(tc.second, map[string][]int{"c0": tc.secondCards}, 2)
			listed := func(p *util.PodWrapper) KubeletPod {
				kp := KubeletPod{Namespace: "default", Name: p.Name, Containers: map[string][]string{}}
				for _, c := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
					kp.Containers[c.Name] = nil
				}
				return kp
			}
			ht.kubelet.set(listed(tc.first), listed(tc.second))
			// next: card index -> its first unit not handed out yet.
			next := map[int]int64{}
			ids := func(cardIdx []int, units int64) []string {
				var out []string
				for _, i := range cardIdx {
					out = append(out, unitsOn(testCards[i].UUID, next[i], units)...)
					next[i] += units
				}
				return out
			}
			for _, c := range append(slices.Clone(tc.first.Spec.InitContainers), tc.first.Spec.Containers...) {
				if _, err := ht.h.Allocate(ht.ctx, ids(tc.firstCards[c.Name], 4)); err != nil {
					t.Fatalf("pod %s container %s: %v", a.Name, c.Name, err)
				}
			}
			_, err := ht.h.Allocate(ht.ctx, ids(tc.secondCards, 4))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("pod %s: Allocate: %v", b.Name, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("pod %s: Allocate succeeded, want %q", b.Name, tc.wantErr)
			}
			if !errors.Is(err, ErrMPSUser) {
				t.Errorf("error %v is not ErrMPSUser", err)
			}
			if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
			if _, _, ok := ht.h.Grant(b.UID, "c0"); ok {
				t.Errorf("refused pod %s holds a grant", b.Name)
			}
		})
	}
}
