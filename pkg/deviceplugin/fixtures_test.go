package deviceplugin

import (
	"context"
	"strconv"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/test/util"
)

// The fixtures below mirror package handoff's own: its tests are internal
// to it, so they cannot import a helper package that imports handoff.

// runPlugin builds the plugin from cfg and serves it until ctx ends.
func runPlugin(ctx context.Context, cfg Config) error {
	p, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	return p.Run(ctx)
}

func testLogger(t *testing.T) klog.Logger {
	logger, _ := ktesting.NewTestContext(t)
	return logger
}

// testCards: two 16 GiB cards and an 80 GiB one.
var testCards = []Card{
	{Card: gpushare.Card{Index: 0, UUID: "GPU-0", Model: "T4"}, Units: 16},
	{Card: gpushare.Card{Index: 1, UUID: "GPU-1", Model: "T4"}, Units: 16},
	{Card: gpushare.Card{Index: 2, UUID: "GPU-2", Model: "A100"}, Units: 80},
}

// fakeKubelet is a PodResources whose answer the test sets.
type fakeKubelet struct {
	mu   sync.Mutex
	pods []handoff.KubeletPod
	err  error
}

func (f *fakeKubelet) List(context.Context) ([]handoff.KubeletPod, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pods, f.err
}

func (f *fakeKubelet) set(pods ...handoff.KubeletPod) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pods = pods
}

// handoffTest is a Handoff over testCards with a fake kubelet.
type handoffTest struct {
	t       *testing.T
	ctx     context.Context
	h       *handoff.Handoff
	kubelet *fakeKubelet
}

func newHandoffTest(t *testing.T) *handoffTest {
	_, ctx := ktesting.NewTestContext(t)
	ht := &handoffTest{t: t, ctx: ctx, kubelet: &fakeKubelet{}}
	ht.h = handoff.New(handoff.Config{Node: "n1", Unit: gpushare.UnitGiB, Cards: testCards, Kubelet: ht.kubelet})
	return ht
}

// pod adds a bound pod whose containers (from w) sit on cards (container
// name -> card indexes), bound at second at.
func (ht *handoffTest) pod(w *util.PodWrapper, cards map[string][]int, at int64) *corev1.Pod {
	ht.t.Helper()
	d, err := gpushare.PodDemand(w.Obj())
	if err != nil {
		ht.t.Fatal(err)
	}
	a := &gpushare.Allocation{Node: "n1", Unit: gpushare.UnitGiB}
	for _, c := range d {
		ca := gpushare.ContainerAllocation{Name: c.Name, Init: c.Init}
		for _, idx := range cards[c.Name] {
			ca.Devices = append(ca.Devices, gpushare.DeviceShare{Index: idx, UUID: testCards[idx].UUID, Units: c.Units})
		}
		a.Containers = append(a.Containers, ca)
	}
	p := w.Node("n1").Allocation(a).Annotation(gpushare.AnnotationAssigned, "false").
		Annotation(gpushare.AnnotationAssumeTime, strconv.FormatInt(at*1e9, 10)).Obj()
	ht.h.UpsertPod(p)
	return p
}

func unitsOn(uuid string, from, n int64) []string {
	var out []string
	for k := from; k < from+n; k++ {
		out = append(out, handoff.DeviceID(uuid, k))
	}
	return out
}
