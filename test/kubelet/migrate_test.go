package kubelet_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/cache"
	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
	"github.com/gpushare/gpushare/test/kubelet/aliyunplugin"
	"github.com/gpushare/gpushare/test/util"
)

// legacyPod is a pod admitted by Aliyun's device plugin before the switch,
// as it was right after: what must not change.
type legacyPod struct {
	pod *corev1.Pod
	// card is the card it runs on, -1 for none (Aliyun's plugin gave it
	// none).
	card  int
	units int64
	// devices are the device IDs kubelet holds for its container c0.
	devices []string
}

// TestMigrateFromAliyun switches a node from Aliyun's device plugin to ours
// under running pods, as docs/migrate-from-aliyun.md describes it, through
// kubelet's own device manager:
//
//  1. Aliyun's plugin (aliyunplugin, its protocol) admits pods placed by
//     Aliyun's extender (ALIYUN_COM_GPU_MEM_* only), one placed by ours
//     while the node still ran Aliyun's plugin, and a pod placed by neither.
//  2. Aliyun's plugin stops, ours starts on the same kubelet: kubelet still
//     holds the old pods' device IDs in Aliyun's format.
//  3. The extender's cache, fed the node and every pod, places new pods until
//     no card has room; kubelet admits them all, each on its annotated card.
//  4. A pod placed by a stale view (a cache that never saw the old pods) is
//     refused by kubelet: its own accounting knows the old pods' units.
//  5. The old pods are untouched, and kubectl inspect gpushare shows them on
//     their cards.
//  6. Our plugin and kubelet restart: the same devices are advertised.
//  7. The old pods end; their units come back and new pods fill them.
//
// After every step no card holds more than its memory, counting the old
// pods' units on the cards Aliyun's plugin ran them on and kubelet's
// device IDs of our pods.
func TestMigrateFromAliyun(t *testing.T) {
	e := newEnv(t, setup{fakeGPUs: "3xTesla-T4:16GiB"})
	const total = 48

	// 1. Aliyun's plugin admits the pods placed before the switch.
	aliyun := e.startAliyun(total)
	var legacy []*legacyPod
	admitLegacy := func(pod *corev1.Pod, card int, wantVisible string) {
		t.Helper()
		pod = e.create(pod)
		res, err := e.host.Admit(pod)
		if err != nil {
			t.Fatalf("Aliyun's plugin: admitting %s: %v", pod.Name, err)
		}
		if got := res["c0"].Env[deviceplugin.EnvVisibleDevices]; got != wantVisible {
			t.Fatalf("Aliyun's plugin gave %s %s=%s, want %s", pod.Name, deviceplugin.EnvVisibleDevices, got, wantVisible)
		}
		// kubelet starts it; the API shows it running.
		pod = e.get(pod.Name)
		pod.Status.Phase = corev1.PodRunning
		if pod, err = e.client.CoreV1().Pods(pod.Namespace).UpdateStatus(e.ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		units, _ := gpushare.PodDemand(pod)
		legacy = append(legacy, &legacyPod{pod: pod, card: card, units: units.Total(), devices: e.host.Devices(pod.UID, "c0", resource)})
	}
	at := time.Now()
	for i, p := range []struct {
		name        string
		units, card int64
	}{{"old-a", 6, 0}, {"old-b", 4, 0}, {"old-c", 8, 1}} {
		admitLegacy(aliyunPlaced(p.name, p.units, int(p.card), at.Add(time.Duration(i)*time.Millisecond)), int(p.card), strconv.FormatInt(p.card, 10))
	}
	// Placed by our extender while the node still ran Aliyun's plugin.
	ours := util.MakePod("old-ours").GPUMem(2).Phase(corev1.PodPending)
	admitLegacy(e.bound(ours, map[string][]int{"c0": {2}}, at), 2, "2")
	if got := e.get("old-ours").Annotations[gpushare.AnnotationAssigned]; got != "true" {
		t.Fatalf("Aliyun's plugin left ASSIGNED=%q on the pod our extender placed, want true", got)
	}
	// Placed by neither (no annotation): Aliyun's plugin gives it no card.
	admitLegacy(util.MakePod("old-stray").GPUMem(2).Node(nodeName).Phase(corev1.PodPending).Obj(), -1, "no-gpu-has-2GiB-to-run")

	// 2. The switch: Aliyun's plugin goes (kubelet marks its devices
	// unhealthy), then ours starts.
	aliyun.Stop()
	e.waitAllocatable(0)
	p := e.servePlugin(gpushare.UnitGiB)
	e.waitAllocatable(total)
	advertised := e.checkAdvertised(legacy)

	// 3. The extender's cache places new pods until nothing fits.
	node := e.waitNode(func(n *corev1.Node) bool { return n.Annotations[gpushare.AnnotationInventory] != "" })
	c := e.extenderCache(node)
	var adms []admission
	var newPods []*corev1.Pod
	fill := func(prefix string) {
		t.Helper()
		n := 0
		for _, units := range []int64{4, 2} {
			for {
				w := util.MakePod(fmt.Sprintf("%s-%02d", prefix, n)).GPUMem(units)
				alloc, err := c.Assume(context.Background(), kubeinfo.NewPodInfo(w.Obj()), nodeName)
				if err != nil {
					break
				}
				c.FinishBinding(w.Obj().UID)
				n++
				pod := e.bind(w, cardsOf(alloc), time.Now())
				res, err := e.host.Admit(pod)
				if err != nil {
					t.Fatalf("admitting %s, placed by the extender's cache: %v", pod.Name, err)
				}
				adms = append(adms, admission{pod: pod, results: res})
				newPods = append(newPods, pod)
				c.UpsertPod(e.get(pod.Name))
			}
		}
		t.Logf("%s: the extender's cache placed %d pods until no card had room", prefix, n)
	}
	fill("new")
	final := e.settle(newPods)
	for _, bad := range e.check(adms, final) {
		t.Error(bad)
	}
	e.checkCards(legacy, adms, final, true)

	// 4. A stale view of the node places one more pod: kubelet's own
	// accounting must refuse it.
	stale, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		t.Fatal(err)
	}
	if err := stale.SetNode(node); err != nil {
		t.Fatal(err)
	}
	w := util.MakePod("stale").GPUMem(4)
	alloc, err := stale.Assume(context.Background(), kubeinfo.NewPodInfo(w.Obj()), nodeName)
	if err != nil {
		t.Fatal(err)
	}
	stalePod := e.bind(w, cardsOf(alloc), time.Now())
	if res, err := e.host.Admit(stalePod); err == nil {
		adms = append(adms, admission{pod: stalePod, results: res})
		t.Errorf("kubelet admitted pod stale (4 GiB on card %v) although the old pods and the new ones fill every card", cardsOf(alloc)["c0"])
		e.checkCards(legacy, adms, e.settle(append(newPods, stalePod)), false)
	} else {
		t.Logf("kubelet refuses the pod a stale view placed: %v", err)
	}
	if err := e.client.CoreV1().Pods("default").Delete(e.ctx, "stale", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// 5. The old pods are as they were, and inspect shows them on their
	// cards.
	e.checkLegacyUntouched(legacy)
	e.checkInspect(legacy, total)
	e.checkMigratedFixture()

	// 6. Restarts: the plugin, then kubelet, advertise the same devices.
	if err := p.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	// kubelet has seen the plugin go (otherwise the wait below may pass on
	// the old plugin's devices, which kubelet then marks unhealthy).
	e.waitAllocatable(0)
	e.servePlugin(gpushare.UnitGiB)
	e.waitAllocatable(total)
	if diff := cmp.Diff(advertised, e.host.AllocatableDevices(resource)); diff != "" {
		t.Errorf("devices advertised after a plugin restart differ (-before +after):\n%s", diff)
	}
	if err := e.host.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := e.host.WaitForResource(e.deadline(15*time.Second), resource, total); err != nil {
		t.Fatalf("plugin did not re-register after the kubelet restart: %v", err)
	}
	if diff := cmp.Diff(advertised, e.host.AllocatableDevices(resource)); diff != "" {
		t.Errorf("devices advertised after a kubelet restart differ (-before +after):\n%s", diff)
	}
	e.checkLegacyUntouched(legacy)

	// 7. The old pods end: their units are the cards' own again.
	var remaining []*legacyPod
	for _, l := range legacy {
		if l.card < 0 {
			remaining = append(remaining, l)
			continue
		}
		e.host.Remove(l.pod.UID)
		if err := e.client.CoreV1().Pods(l.pod.Namespace).Delete(e.ctx, l.pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c.DeletePod(l.pod.UID)
	}
	legacy = remaining
	e.waitOwnDevices(total)
	fill("after")
	final = e.settle(newPods)
	for _, bad := range e.check(adms, final) {
		t.Error(bad)
	}
	e.checkCards(legacy, adms, final, true)
}

// TestRegisteredWhileAliyunRuns: our plugin starts while Aliyun's is still
// registered (the switch done out of order, or two DaemonSets overlapping).
// kubelet takes ours in place of Aliyun's; when Aliyun's connection then
// ends, kubelet disconnects the plugin holding the resource by then, ours,
// and marks every device unhealthy. Our plugin must notice that kubelet let
// go of it and register again, so the node's allocatable comes back
// without a kubelet or plugin restart.
func TestRegisteredWhileAliyunRuns(t *testing.T) {
	e := newEnv(t, setup{fakeGPUs: "3xTesla-T4:16GiB"})
	const total = 48
	aliyun := e.startAliyun(total)
	e.servePlugin(gpushare.UnitGiB)
	// kubelet lists our devices once ours has registered in place of
	// Aliyun's.
	e.waitOwnDevices(total)

	aliyun.Stop()
	// kubelet drops ours: every device unhealthy.
	e.waitAllocatable(0)
	// Ours registers again.
	e.waitOwnDevices(total)
	pod := e.bind(util.MakePod("after").GPUMem(4), map[string][]int{"c0": {1}}, time.Now())
	res, err := e.host.Admit(pod)
	if err != nil {
		t.Fatalf("admitting a pod after kubelet dropped the plugin and it registered again: %v", err)
	}
	if got, want := res["c0"].Env[deviceplugin.EnvVisibleDevices], e.card(1).UUID; got != want {
		t.Errorf("pod after: %s=%s, want %s (its annotated card)", deviceplugin.EnvVisibleDevices, got, want)
	}
}

// startAliyun starts Aliyun's device plugin (aliyunplugin) on e's kubelet
// until the test ends, and waits until kubelet has its total devices.
func (e *env) startAliyun(total int64) *aliyunplugin.Plugin {
	e.t.Helper()
	aliyun, err := aliyunplugin.Start(e.ctx, aliyunplugin.Config{Dir: filepath.Join(e.dir, "device-plugins"), Node: nodeName, Cards: e.cards, Client: e.client})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(aliyun.Stop)
	if err := e.host.WaitForResource(e.deadline(10*time.Second), resource, total); err != nil {
		e.t.Fatal(err)
	}
	return aliyun
}

// aliyunPlaced is a pod as Aliyun's scheduler extender leaves it: bound,
// with the ALIYUN_COM_GPU_MEM_* annotations of its patch, waiting for
// kubelet.
func aliyunPlaced(name string, units int64, card int, at time.Time) *corev1.Pod {
	return util.MakePod(name).GPUMem(units).Node(nodeName).Phase(corev1.PodPending).
		Annotation(gpushare.AnnotationIndex, strconv.Itoa(card)).
		Annotation(gpushare.AnnotationDevMem, "16").
		Annotation(gpushare.AnnotationPodMem, strconv.FormatInt(units, 10)).
		Annotation(gpushare.AnnotationAssigned, "false").
		Annotation(gpushare.AnnotationAssumeTime, strconv.FormatInt(at.UnixNano(), 10)).Obj()
}

func (e *env) create(pod *corev1.Pod) *corev1.Pod {
	e.t.Helper()
	got, err := e.client.CoreV1().Pods(pod.Namespace).Create(e.ctx, pod, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

func (e *env) get(name string) *corev1.Pod {
	e.t.Helper()
	got, err := e.client.CoreV1().Pods("default").Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return got
}

// extenderCache is the extender's cache as it stands after the switch:
// the node with its published inventory and every pod of the API.
func (e *env) extenderCache(node *corev1.Node) *cache.Cache {
	e.t.Helper()
	c, err := cache.New(cache.Config{Policy: allocator.NameBinpack})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := c.SetNode(node); err != nil {
		e.t.Fatal(err)
	}
	pods, err := e.client.CoreV1().Pods(metav1.NamespaceAll).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range pods.Items {
		c.UpsertPod(&pods.Items[i])
	}
	return c
}

func cardsOf(a *gpushare.Allocation) map[string][]int {
	cards := map[string][]int{}
	for _, ca := range a.Containers {
		for _, d := range ca.Devices {
			cards[ca.Name] = append(cards[ca.Name], d.Index)
		}
	}
	return cards
}

// checkAdvertised checks what our plugin advertises right after the
// switch: each card's memory in devices, the old pods' device IDs among
// them in place of as many of the card's own (the pod without a card's
// left out), and returns the list.
func (e *env) checkAdvertised(legacy []*legacyPod) []string {
	e.t.Helper()
	ids := e.host.AllocatableDevices(resource)
	advertised := map[string]bool{}
	own := map[int]int64{}
	byUUID := map[string]int{}
	for _, d := range e.cards {
		byUUID[d.UUID] = d.Index
	}
	for _, id := range ids {
		advertised[id] = true
		if uuid, _, err := handoff.ParseDeviceID(id); err == nil {
			own[byUUID[uuid]]++
		}
	}
	wantOwn := map[int]int64{}
	for _, d := range e.cards {
		wantOwn[d.Index] = d.MemoryMiB / 1024
	}
	for _, l := range legacy {
		for _, id := range l.devices {
			if advertised[id] != (l.card >= 0) {
				e.t.Errorf("device %s of old pod %s (card %d): advertised %v", id, l.pod.Name, l.card, advertised[id])
			}
		}
		if l.card >= 0 {
			wantOwn[l.card] -= int64(len(l.devices))
		}
	}
	if diff := cmp.Diff(wantOwn, own); diff != "" {
		e.t.Errorf("own devices per card (-want +got):\n%s", diff)
	}
	e.t.Logf("after the switch kubelet has %d devices: own per card %v, the rest the old pods' on their cards", len(ids), own)
	return ids
}

// checkCards checks that no card holds more than its memory: the old pods'
// units on their cards plus the units of our pods by kubelet's device IDs
// and by their final annotations. full also wants every card used up.
func (e *env) checkCards(legacy []*legacyPod, adms []admission, final map[string]*corev1.Pod, full bool) {
	e.t.Helper()
	size := map[int]int64{}
	byUUID := map[string]int{}
	for _, d := range e.cards {
		size[d.Index] = d.MemoryMiB / 1024
		byUUID[d.UUID] = d.Index
	}
	byKubelet, byAnnotation := map[int]int64{}, map[int]int64{}
	for _, l := range legacy {
		if l.card >= 0 {
			byKubelet[l.card] += l.units
			byAnnotation[l.card] += l.units
		}
	}
	for _, adm := range adms {
		for name, r := range adm.results {
			for _, id := range r.Devices[resource] {
				uuid, _, err := handoff.ParseDeviceID(id)
				if err != nil {
					e.t.Errorf("%s/%s holds device %s, not one of ours: %v", adm.pod.Name, name, id, err)
					continue
				}
				byKubelet[byUUID[uuid]]++
			}
		}
		a, err := gpushare.ParseAllocation(final[adm.pod.Name].Annotations[gpushare.AnnotationAllocation])
		if err != nil {
			e.t.Fatal(err)
		}
		for idx, u := range a.PerCard() {
			byAnnotation[idx] += u
		}
	}
	for idx, limit := range size {
		for what, used := range map[string]int64{"kubelet's devices": byKubelet[idx], "the annotations": byAnnotation[idx]} {
			if used > limit {
				e.t.Errorf("card %d holds %d GiB by the old pods and %s, has %d", idx, used, what, limit)
			} else if full && used != limit {
				e.t.Errorf("card %d holds %d GiB by the old pods and %s, want it full (%d)", idx, used, what, limit)
			}
		}
	}
}

// checkLegacyUntouched: the old pods' annotations are those Aliyun's
// components left, and kubelet still holds their devices.
func (e *env) checkLegacyUntouched(legacy []*legacyPod) {
	e.t.Helper()
	for _, l := range legacy {
		got := e.get(l.pod.Name)
		if diff := cmp.Diff(l.pod.Annotations, got.Annotations); diff != "" {
			e.t.Errorf("annotations of old pod %s changed (-before +now):\n%s", l.pod.Name, diff)
		}
		if diff := cmp.Diff(l.devices, e.host.Devices(l.pod.UID, "c0", resource)); diff != "" {
			e.t.Errorf("kubelet's devices of old pod %s changed (-before +now):\n%s", l.pod.Name, diff)
		}
	}
}

// checkInspect: what kubectl inspect gpushare computes from the API (the
// extender's cache fed the node and every unfinished pod, as
// inspect.APISource does) shows each old pod with its units on its card,
// the one without a card apart, and every card full. (pkg/inspect itself
// cannot be linked here: its kubectl libraries pull in Go's plugin
// package, which makes the binary bind every symbol at start, and NVML's
// are resolved only when the library is loaded. The golden test
// migrated in pkg/inspect prints this state, written by updateMigrated.)
func (e *env) checkInspect(legacy []*legacyPod, total int64) {
	e.t.Helper()
	node, err := e.client.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := cache.New(cache.Config{})
	if err != nil {
		e.t.Fatal(err)
	}
	if err := c.SetNode(node); err != nil {
		e.t.Fatal(err)
	}
	pods, err := e.client.CoreV1().Pods(metav1.NamespaceAll).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range pods.Items {
		if ph := pods.Items[i].Status.Phase; ph != corev1.PodSucceeded && ph != corev1.PodFailed {
			c.UpsertPod(&pods.Items[i])
		}
	}
	views, _ := c.Inspect(nodeName)
	if len(views) != 1 {
		e.t.Fatalf("inspect shows %d nodes, want 1", len(views))
	}
	n := views[0]
	got := map[string]string{}
	for _, card := range n.Cards {
		for _, p := range card.Pods {
			if strings.HasPrefix(p.Name, "old-") {
				got[p.Name] = fmt.Sprintf("card %d: %d", card.Index, p.Units)
			}
		}
	}
	for _, p := range n.Unattributed {
		got[p.Name] = fmt.Sprintf("unknown card: %d", p.Units)
	}
	want := map[string]string{}
	for _, l := range legacy {
		if l.card >= 0 {
			want[l.pod.Name] = fmt.Sprintf("card %d: %d", l.card, l.units)
		} else {
			want[l.pod.Name] = fmt.Sprintf("unknown card: %d", l.units)
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		e.t.Errorf("inspect's old pods (-want +got):\n%s", diff)
	}
	if n.Used != total || n.Total != total || len(n.Ignored) != 0 {
		e.t.Errorf("inspect shows %d/%d GiB allocated and %d ignored annotations, want %d/%d and none", n.Used, n.Total, len(n.Ignored), total, total)
	}
}

// migratedFixture is where the node and pods of the migrated node are
// kept for pkg/inspect's golden test (TestMigratedNode), which prints
// them with kubectl inspect gpushare itself.
var migratedFixture = filepath.Join("..", "..", "pkg", "inspect", "testdata", "migrated.json")

var update = flag.Bool("update", false, "rewrite "+migratedFixture)

// checkMigratedFixture compares the API's node and pods (bind times and
// the fake API's bookkeeping aside, which differ on every run) with migratedFixture, or rewrites it with
// -update, so the fixture pkg/inspect prints is this test's state.
func (e *env) checkMigratedFixture() {
	e.t.Helper()
	node, err := e.client.CoreV1().Nodes().Get(e.ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	pods, err := e.client.CoreV1().Pods(metav1.NamespaceAll).List(e.ctx, metav1.ListOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	list := corev1.List{TypeMeta: metav1.TypeMeta{Kind: "List", APIVersion: "v1"}}
	node.ResourceVersion, node.ManagedFields = "", nil
	node.TypeMeta = metav1.TypeMeta{Kind: "Node", APIVersion: "v1"}
	list.Items = append(list.Items, runtime.RawExtension{Object: node})
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	for i := range pods.Items {
		p := &pods.Items[i]
		p.ResourceVersion, p.ManagedFields = "", nil
		p.TypeMeta = metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}
		if _, ok := p.Annotations[gpushare.AnnotationAssumeTime]; ok {
			p.Annotations[gpushare.AnnotationAssumeTime] = "1700000000000000000"
		}
		list.Items = append(list.Items, runtime.RawExtension{Object: p})
	}
	got, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		e.t.Fatal(err)
	}
	got = append(got, '\n')
	if *update {
		if err := os.WriteFile(migratedFixture, got, 0o644); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(migratedFixture)
	if err != nil {
		e.t.Fatalf("reading %s (run this test with -update to write it): %v", migratedFixture, err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		e.t.Errorf("%s differs from this test's node and pods (-file +test; run it with -update, then pkg/inspect's tests with -update):\n%s", migratedFixture, diff)
	}
}

// waitOwnDevices waits until our plugin advertises n devices, all its own
// (the old pods' adopted IDs given back).
func (e *env) waitOwnDevices(n int) {
	e.t.Helper()
	ctx := e.deadline(10 * time.Second)
	for {
		ids := e.host.AllocatableDevices(resource)
		var foreign []string
		for _, id := range ids {
			if _, _, err := handoff.ParseDeviceID(id); err != nil {
				foreign = append(foreign, id)
			}
		}
		if len(ids) == n && len(foreign) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			sort.Strings(foreign)
			e.t.Fatalf("kubelet has %d devices, %d of them not ours (%v); want %d, all ours", len(ids), len(foreign), foreign, n)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
