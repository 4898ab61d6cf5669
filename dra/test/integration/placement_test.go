package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/pkg/draview"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/simulator"
	"github.com/gpushare/gpushare/pkg/simulator/trace"
	"github.com/gpushare/gpushare/pkg/version"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// placementNode is one DRA node of TestExtenderPlacesClaimPodsAsSimulated.
type placementNode struct {
	name     string
	cardsGiB []int64
	cpu, mem string
}

// TestExtenderPlacesClaimPodsAsSimulated holds the simulator's DRA replay
// with the extender rating the nodes (fragaware@dra:index/extender, the
// model behind docs/dra.md's figures) to the real thing: nine DRA nodes
// of mixed cards, two of them alike (the drivers' fake GPUs), the shipped kube-scheduler
// configuration v1.37.2 and the extender with its default policy and
// --dra-node-choice. Pods asking 2 to 24 GiB and 1 to 8 cores, converted
// as the webhook converts them (the marker included), go one at a time,
// until the cards are more than full: each must land on a node the
// simulator rates best (kube-scheduler breaks ties at random), its claim
// on the card the simulator gives it there, or wait where the simulator
// finds no node; the simulator then follows the real choice. Then the
// extender is stopped: the claim pods' extender entry is ignorable, so a
// marked pod still schedules, without the node choice.
func TestExtenderPlacesClaimPodsAsSimulated(t *testing.T) {
	minor, err := version.KubernetesMinor(framework.KubernetesVersion)
	if err != nil {
		t.Fatal(err)
	}
	nodes := []placementNode{
		{"dra-1x16", []int64{16}, "8", "64Gi"},
		// Twins: kube-scheduler breaks their ties.
		{"dra-2x16-a", []int64{16, 16}, "16", "128Gi"},
		{"dra-2x16-b", []int64{16, 16}, "16", "128Gi"},
		{"dra-4x16", []int64{16, 16, 16, 16}, "32", "256Gi"},
		{"dra-16-24", []int64{16, 24}, "16", "96Gi"},
		{"dra-2x24", []int64{24, 24}, "24", "192Gi"},
		{"dra-1x32", []int64{32}, "8", "64Gi"},
		{"dra-2x32", []int64{32, 32}, "32", "256Gi"},
		{"dra-4x24", []int64{24, 24, 24, 24}, "64", "512Gi"},
	}
	var capacity int64
	specs := map[string]string{}
	for _, n := range nodes {
		var parts []string
		for _, g := range n.cardsGiB {
			parts = append(parts, fmt.Sprintf("1xTesla-T4:%dGiB", g))
			capacity += g
		}
		specs[n.name] = strings.Join(parts, ",")
	}
	rng := rand.New(rand.NewPCG(23, 1))
	type podShape struct {
		name  string
		gib   int64
		cores int
	}
	var shapes []podShape
	for arrived := int64(0); arrived < capacity*13/10; {
		s := podShape{name: fmt.Sprintf("p%02d", len(shapes)), gib: []int64{2, 4, 4, 6, 8, 8, 12, 16, 24}[rng.IntN(9)], cores: []int{1, 2, 4, 8}[rng.IntN(4)]}
		shapes = append(shapes, s)
		arrived += s.gib
	}
	// The simulator's trace, read from the objects it stands for: the
	// nodes with their cards (as an inventory: the replay's cards), the
	// pods as they ask before the webhook's conversion.
	draLabel := map[string]string{"gpushare.io/device-mode": "dra"}
	var traceNodes []*corev1.Node
	for _, n := range nodes {
		node := util.MakeNode(n.name).Cards("Tesla-T4", n.cardsGiB...).Host(n.cpu, n.mem).Obj()
		node.Labels = draLabel
		traceNodes = append(traceNodes, node)
	}
	pods := make([]*corev1.Pod, len(shapes))
	for i, s := range shapes {
		pod := util.MakePod(s.name).GPUMem(s.gib).Requests(fmt.Sprint(s.cores), fmt.Sprintf("%dGi", 4*s.cores)).Obj()
		pod.UID = ""
		pod.Spec.NodeSelector = draLabel
		pods[i] = pod
	}
	tr, err := trace.TraceOf(traceNodes, pods)
	if err != nil {
		t.Fatal(err)
	}
	step, err := simulator.NewStepper(tr, simulator.Options{Policy: allocator.DefaultPolicy,
		DRA: &simulator.DRA{Order: simulator.DRAOrderIndex, NodeChoice: simulator.DRANodeExtender}, Scheduler: simulator.ShippedScheduler.ForKubernetes(minor)})
	if err != nil {
		t.Fatal(err)
	}

	listen := util.FreeAddr(t)
	c := startDRAWith(t, specs, "http://"+listen+extender.Prefix)
	ctx := context.Background()
	for _, n := range nodes {
		node, err := c.admin.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Labels = draLabel
		if node, err = c.admin.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		host := util.MakeNode(n.name).Host(n.cpu, n.mem).Obj()
		node.Status.Capacity, node.Status.Allocatable = host.Status.Capacity, host.Status.Allocatable
		if _, err := c.admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	stopExtender := runExtender(t, extender.Config{Kubeconfig: c.cp.AdminKubeconfig(), Listen: listen, Policy: allocator.DefaultPolicy,
		QPS: 100, Burst: 200, DRANodeChoice: true, WebhookDRAUnit: gpushare.UnitGiB})
	var held int64 // GiB the claims hold, as the extender must see them
	waitExtender(t, listen, len(nodes), held)

	var placed, failed, ties int
	var firstPlaced string
	for k, s := range shapes {
		choice := step.Choices(&tr.Pods[k])
		if len(choice.Best) > 1 {
			ties++
		}
		c.convertAndCreate(t, pods[k].DeepCopy(), true)
		got := c.waitPod(t, s.name, len(choice.Best) > 0)
		switch {
		case got.Spec.NodeName == "" && len(choice.Best) > 0:
			t.Fatalf("pod %s (%d GiB) waits; the simulator places it on one of %v", s.name, s.gib, choice.Best)
		case got.Spec.NodeName != "" && !slices.Contains(choice.Best, got.Spec.NodeName):
			t.Fatalf("pod %s (%d GiB, %d cores) went to %s; the simulator rates best %v (the extender's: %v)", s.name, s.gib, s.cores, got.Spec.NodeName, choice.Best, choice.Extender)
		}
		cards, err := step.Place(got.Spec.NodeName)
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeName == "" {
			failed++
			if err := c.admin.CoreV1().Pods("default").Delete(ctx, s.name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		placed++
		if firstPlaced == "" {
			firstPlaced = s.name
		}
		claim, err := c.podClaimNamed(ctx, got, draclaim.ClaimName)
		if err != nil {
			t.Fatal(err)
		}
		a := allocationOf(t, claim)
		idx, _ := draview.DeviceIndex(a.device)
		if diff := cmp.Diff([][]int{{idx}}, cards); diff != "" || a.mib != s.gib<<10 {
			t.Fatalf("pod %s on %s: %d MiB of %s; cards (-real +simulator):\n%s", s.name, got.Spec.NodeName, a.mib, a.device, diff)
		}
		held += s.gib
		waitExtender(t, listen, len(nodes), held)
	}
	t.Logf("%d claim pods: %d placed as simulated, %d waited as simulated; %d had a choice of nodes", len(shapes), placed, failed, ties)
	if placed == 0 || failed == 0 || ties == 0 {
		t.Errorf("the sequence exercises too little: want pods placed, pods waiting and ties")
	}

	// The claim pods' entry is ignorable: with the extender stopped, a
	// marked pod that fits (in the room of the first pod placed, deleted
	// with its claim) still schedules.
	stopExtender()
	last := util.MakePod("extender-down").GPUMem(2).Obj()
	last.UID, last.Spec.NodeSelector = "", draLabel
	if err := c.admin.CoreV1().Pods("default").Delete(ctx, firstPlaced, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	c.convertAndCreate(t, last, true)
	t.Logf("with the extender stopped, a marked claim pod still scheduled, on %s", c.waitPod(t, last.Name, true).Spec.NodeName)
}

// waitExtender waits until the extender's inspect shows nodes DRA nodes
// whose cards hold gib GiB in all, and then a little longer, for its pod
// informer to have the pods bound with them (their CPU).
func waitExtender(t *testing.T, listen string, nodes int, gib int64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := http.Get("http://" + listen + extender.Prefix + "/inspect")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		var res extender.InspectResult
		if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
			return false, nil
		}
		var dra int
		var used int64
		for _, n := range res.Nodes {
			if n.Source == "dra" {
				dra++
				used += n.Used
			}
		}
		return dra == nodes && used == gib, nil
	})
	if err != nil {
		t.Fatalf("the extender never showed %d DRA nodes holding %d GiB: %v", nodes, gib, err)
	}
	time.Sleep(100 * time.Millisecond)
}

// runExtender runs the extender in this process until the returned stop,
// and waits until it is ready.
func runExtender(t *testing.T, cfg extender.Config) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), klog.Background().WithName("extender")))
	done := make(chan error, 1)
	go func() {
		e, err := extender.New(ctx, cfg)
		if err == nil {
			err = e.Run(ctx)
		}
		done <- err
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("extender: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("the extender ended: %w", err)
		default:
		}
		resp, err := http.Get("http://" + cfg.Listen + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("waiting for the extender: %v", err)
	}
	return stop
}
