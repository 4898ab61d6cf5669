package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/gpushare/gpushare/pkg/draclaim"
	"github.com/gpushare/gpushare/test/util"
)

// fakeTemplates records Ensure's calls and fails them with err.
type fakeTemplates struct {
	calls []string // "NAMESPACE/NAME dryRun=BOOL"
	err   error
}

func (f *fakeTemplates) Ensure(_ context.Context, ns string, t *resourcev1.ResourceClaimTemplate, dryRun bool) error {
	f.calls = append(f.calls, ns+"/"+t.Name+" dryRun="+map[bool]string{true: "true", false: "false"}[dryRun])
	return f.err
}

// fakeQuotas serves List from quotas (namespace -> its quotas), or fails
// with err.
type fakeQuotas struct {
	quotas map[string][]*corev1.ResourceQuota
	err    error
}

func (f fakeQuotas) List(_ context.Context, ns string) ([]*corev1.ResourceQuota, error) {
	return f.quotas[ns], f.err
}

// quota is a ResourceQuota of namespace default with hard limits of
// name=value pairs.
func quota(name string, hard ...string) *corev1.ResourceQuota {
	q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{}}}
	for i := 0; i+1 < len(hard); i += 2 {
		q.Spec.Hard[corev1.ResourceName(hard[i])] = resource.MustParse(hard[i+1])
	}
	return q
}

func onDRANodes(p *corev1.Pod) *corev1.Pod {
	p.Spec.NodeSelector = map[string]string{"gpushare.io/device-mode": "dra"}
	return p
}

// TestDRAConversion: with EnableDRA, a pod CREATE selecting the DRA nodes
// that asks gpu-mem is converted (its template ensured first, without
// writing for a dry run) and, without NodeChoice, keeps its scheduler; one the conversion
// cannot keep, or whose template fails, is refused with the reason; every
// other request takes the scheduler-name route as before. With NodeChoice
// the conversion also adds the marker gpushare.io/dra-claim and sends a
// pod of the default scheduler to the webhook's, which knows the marker.
// A pod whose namespace has a quota on GPU memory that would not count it
// once converted (on gpu-mem without the marker; on either without
// NodeChoice) is refused, naming the quota and the fix.
func TestDRAConversion(t *testing.T) {
	setPatch := `[{"op":"add","path":"/spec/schedulerName","value":"gpushare-scheduler"}]`
	tests := []struct {
		name        string
		pod         *corev1.Pod
		dryRun      bool
		storeErr    error
		wantResult  string
		wantCalls   []string
		wantPatch   string // for results other than converted
		wantMessage string // for denied
		nodeChoice  bool
		// wantScheduler: a converted pod's schedulerName after the patch.
		wantScheduler string
		// quotas are namespace default's; quotaErr fails their listing.
		quotas   []*corev1.ResourceQuota
		quotaErr error
	}{
		{name: "converted", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()), wantResult: ResultConverted, wantCalls: []string{"default/gpushare-gpu-mem-8gi dryRun=false"}},
		{name: "node choice", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()), nodeChoice: true, wantResult: ResultConverted,
			wantCalls: []string{"default/gpushare-gpu-mem-8gi dryRun=false"}, wantScheduler: "gpushare-scheduler"},
		{name: "node choice keeps a scheduler of the pod's own", pod: func() *corev1.Pod {
			p := onDRANodes(util.MakePod("p").GPUMem(8).Obj())
			p.Spec.SchedulerName = "mine"
			return p
		}(), nodeChoice: true, wantResult: ResultConverted, wantCalls: []string{"default/gpushare-gpu-mem-8gi dryRun=false"}, wantScheduler: "mine"},
		{name: "dry run writes nothing", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()), dryRun: true, wantResult: ResultConverted, wantCalls: []string{"default/gpushare-gpu-mem-8gi dryRun=true"}},
		{name: "two GPU containers refused", pod: onDRANodes(util.MakePod("p").GPUMem(4).GPUMem(4).Obj()), wantResult: ResultDenied, wantMessage: `containers "c0", "c1" all ask aliyun.com/gpu-mem`},
		{name: "a bad request refused", pod: onDRANodes(util.MakePod("p").GPUMem(0).Obj()), wantResult: ResultDenied, wantMessage: "want a positive whole number"},
		{name: "template fails", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()), storeErr: errors.New("the API is down"), wantResult: ResultDenied,
			wantCalls: []string{"default/gpushare-gpu-mem-8gi dryRun=false"}, wantMessage: "its ResourceClaimTemplate: the API is down"},
		{name: "no gpu-mem on a DRA node", pod: onDRANodes(util.MakePod("p").Container("c").Obj()), wantResult: ResultSkipped},
		{name: "another node selector", pod: func() *corev1.Pod {
			p := util.MakePod("p").GPUMem(8).Obj()
			p.Spec.NodeSelector = map[string]string{"gpushare.io/device-mode": "device-plugin"}
			return p
		}(), wantResult: ResultMutated, wantPatch: setPatch},
		{name: "no node selector", pod: util.MakePod("p").GPUMem(8).Obj(), wantResult: ResultMutated, wantPatch: setPatch},
		{name: "required node affinity converted", pod: affinityPod([]corev1.NodeSelectorRequirement{{Key: "gpushare.io/device-mode", Operator: corev1.NodeSelectorOpIn, Values: []string{"dra"}}}),
			wantResult: ResultConverted, wantCalls: []string{"default/gpushare-gpu-mem-8gi dryRun=false"}},
		// ResourceQuota admission sees the converted pod: a quota on
		// gpu-mem must have the marker, under which it counts, beside it.
		{name: "a quota counting the marker", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()), nodeChoice: true,
			quotas:     []*corev1.ResourceQuota{quota("gpu", "requests.aliyun.com/gpu-mem", "16", "requests.gpushare.io/dra-claim", "16")},
			wantResult: ResultConverted, wantCalls: []string{"default/gpushare-gpu-mem-8gi dryRun=false"}, wantScheduler: "gpushare-scheduler"},
		{name: "a quota on the marker alone", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()), nodeChoice: true,
			quotas:     []*corev1.ResourceQuota{quota("gpu", "requests.gpushare.io/dra-claim", "16")},
			wantResult: ResultConverted, wantCalls: []string{"default/gpushare-gpu-mem-8gi dryRun=false"}, wantScheduler: "gpushare-scheduler"},
		{name: "a quota on something else", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()),
			quotas:     []*corev1.ResourceQuota{quota("cpu", "requests.cpu", "4", "aliyun.com/gpu-mem", "1")},
			wantResult: ResultConverted, wantCalls: []string{"default/gpushare-gpu-mem-8gi dryRun=false"}},
		{name: "a quota on gpu-mem alone refused", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()), nodeChoice: true,
			quotas:     []*corev1.ResourceQuota{quota("cpu", "requests.cpu", "4"), quota("gpu", "requests.aliyun.com/gpu-mem", "16")},
			wantResult: ResultDenied,
			wantMessage: "ResourceQuota default/gpu limits requests.aliyun.com/gpu-mem to 16 but not requests.gpushare.io/dra-claim, under which pods converted to DRA claims count their GPU memory: " +
				"this pod's 8 GiB would escape it; add requests.gpushare.io/dra-claim (in GiB, like aliyun.com/gpu-mem) to ResourceQuota default/gpu (docs/dra.md#quotas)"},
		{name: "a quota on gpu-mem without node choice refused", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()),
			quotas:      []*corev1.ResourceQuota{quota("gpu", "requests.aliyun.com/gpu-mem", "16", "requests.gpushare.io/dra-claim", "16")},
			wantResult:  ResultDenied,
			wantMessage: "ResourceQuota default/gpu limits requests.aliyun.com/gpu-mem to 16, and without the extender's node choice (--dra-node-choice) a pod converted to a DRA claim carries nothing a quota counts its GPU memory by: this pod's 8 GiB would escape it"},
		{name: "a quota on the marker without node choice refused", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()),
			quotas:     []*corev1.ResourceQuota{quota("gpu", "requests.gpushare.io/dra-claim", "16")},
			wantResult: ResultDenied, wantMessage: "ResourceQuota default/gpu limits requests.gpushare.io/dra-claim to 16, and without the extender's node choice"},
		{name: "quotas unknown refused", pod: onDRANodes(util.MakePod("p").GPUMem(8).Obj()), nodeChoice: true, quotaErr: errors.New("not synced"),
			wantResult: ResultDenied, wantMessage: "not synced"},
		{name: "a pod not bound for DRA nodes is not checked", pod: util.MakePod("p").GPUMem(8).Obj(), nodeChoice: true,
			quotas: []*corev1.ResourceQuota{quota("gpu", "requests.aliyun.com/gpu-mem", "16")}, wantResult: ResultMutated, wantPatch: setPatch},
		{name: "affinity to DRA nodes and others", pod: affinityPod(
			[]corev1.NodeSelectorRequirement{{Key: "gpushare.io/device-mode", Operator: corev1.NodeSelectorOpIn, Values: []string{"dra"}}},
			[]corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}),
			wantResult: ResultMutated, wantPatch: setPatch},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, _ := newHandler(t, ktestingLogger(t))
			store := &fakeTemplates{err: tc.storeErr}
			quotas := fakeQuotas{quotas: map[string][]*corev1.ResourceQuota{"default": tc.quotas}, err: tc.quotaErr}
			if err := h.EnableDRA(DRA{NodeSelector: map[string]string{"gpushare.io/device-mode": "dra"}, Unit: "GiB", NodeChoice: tc.nodeChoice, Templates: store, Quotas: quotas}); err != nil {
				t.Fatal(err)
			}
			body := review(t, admissionv1.Create, podsResource, "", tc.pod)
			if tc.dryRun {
				body = strings.Replace(body, `"operation":"CREATE"`, `"operation":"CREATE","dryRun":true`, 1)
			}
			rec := post(h, body)
			if rec.Code != http.StatusOK {
				t.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
			var out admissionv1.AdmissionReview
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Response == nil {
				t.Fatalf("reply %s (%v)", rec.Body, err)
			}
			if got := testutil.ToFloat64(h.admissions.WithLabelValues(tc.wantResult)); got != 1 {
				t.Errorf("gpushare_webhook_admissions_total{result=%q} = %v, want 1; response %+v", tc.wantResult, got, out.Response)
			}
			if diff := cmp.Diff(tc.wantCalls, store.calls); diff != "" {
				t.Errorf("template calls (-want +got):\n%s", diff)
			}
			resp := out.Response
			switch tc.wantResult {
			case ResultDenied:
				if resp.Allowed || resp.Result == nil || !strings.Contains(resp.Result.Message, tc.wantMessage) || resp.Patch != nil {
					t.Errorf("response %+v, want refused with a message containing %q and no patch", resp, tc.wantMessage)
				}
				if resp.Result != nil && !strings.Contains(resp.Result.Message, "gpushare.io/device-mode=dra") {
					t.Errorf("message %q does not say which node selector sent the pod to DRA", resp.Result.Message)
				}
			case ResultConverted:
				conv, err := draclaim.Convert(tc.pod, "GiB", tc.nodeChoice)
				if err != nil {
					t.Fatal(err)
				}
				want, _ := json.Marshal(conv.Patch)
				if !resp.Allowed || !strings.HasPrefix(string(resp.Patch), strings.TrimSuffix(string(want), "]")) || resp.PatchType == nil || *resp.PatchType != admissionv1.PatchTypeJSONPatch {
					t.Errorf("response %+v (patch %s), want allowed with the conversion's patch %s", resp, resp.Patch, want)
				}
				var ops []draclaim.PatchOp
				if err := json.Unmarshal(resp.Patch, &ops); err != nil {
					t.Fatal(err)
				}
				sched := tc.pod.Spec.SchedulerName
				for _, op := range ops {
					if op.Path == "/spec/schedulerName" {
						sched, _ = op.Value.(string)
					}
				}
				if sched != tc.wantScheduler {
					t.Errorf("the converted pod's scheduler is %q, want %q (patch %s)", sched, tc.wantScheduler, resp.Patch)
				}
			default:
				if !resp.Allowed || string(resp.Patch) != tc.wantPatch {
					t.Errorf("response %+v (patch %q), want allowed with patch %q", resp, resp.Patch, tc.wantPatch)
				}
			}
		})
	}
}

func TestEnableDRARefusesBadSettings(t *testing.T) {
	good := DRA{NodeSelector: map[string]string{"gpushare.io/device-mode": "dra"}, Unit: "GiB", Templates: &fakeTemplates{}, Quotas: fakeQuotas{}}
	for name, mutate := range map[string]func(*DRA){
		"bad key":      func(d *DRA) { d.NodeSelector = map[string]string{"not a key": "dra"} },
		"bad value":    func(d *DRA) { d.NodeSelector = map[string]string{"gpushare.io/device-mode": "not a value!"} },
		"no label":     func(d *DRA) { d.NodeSelector = nil },
		"bad unit":     func(d *DRA) { d.Unit = "GB" },
		"no templates": func(d *DRA) { d.Templates = nil },
		"no quotas":    func(d *DRA) { d.Quotas = nil },
	} {
		t.Run(name, func(t *testing.T) {
			h, _ := newHandler(t, ktestingLogger(t))
			d := good
			mutate(&d)
			if err := h.EnableDRA(d); err == nil {
				t.Errorf("EnableDRA(%+v): no error", d)
			}
		})
	}
}

// TestClientTemplates: Ensure creates a missing template, accepts an
// existing one with the same spec, refuses one with another spec, creates
// nothing for a dry run, and refuses (and deletes again) a template the API
// server stored without its capacity request.
func TestClientTemplates(t *testing.T) {
	eight := resource.MustParse("8Gi")
	tmpl := draclaim.Template(&eight)
	ctx := context.Background()
	get := func(c *fake.Clientset) (*resourcev1.ResourceClaimTemplate, error) {
		return c.ResourceV1().ResourceClaimTemplates("ns").Get(ctx, tmpl.Name, metav1.GetOptions{})
	}

	t.Run("created, then found", func(t *testing.T) {
		c := fake.NewClientset()
		for i := range 2 {
			if err := (ClientTemplates{Client: c}).Ensure(ctx, "ns", tmpl, false); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		got, err := get(c)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tmpl.Spec, got.Spec); diff != "" {
			t.Errorf("stored spec (-want +got):\n%s", diff)
		}
	})
	t.Run("another spec", func(t *testing.T) {
		other := tmpl.DeepCopy()
		other.Namespace = "ns"
		other.Spec.Spec.Devices.Requests[0].Exactly.DeviceClassName = "someone-elses"
		c := fake.NewClientset(other)
		err := (ClientTemplates{Client: c}).Ensure(ctx, "ns", tmpl, false)
		if err == nil || !strings.Contains(err.Error(), "exists with a spec other than gpushare's") {
			t.Errorf("err = %v, want a spec mismatch", err)
		}
	})
	t.Run("dry run", func(t *testing.T) {
		c := fake.NewClientset()
		var dryRun []string
		c.PrependReactor("create", "resourceclaimtemplates", func(a clienttesting.Action) (bool, runtime.Object, error) {
			dryRun = a.(clienttesting.CreateActionImpl).CreateOptions.DryRun
			return false, nil, nil
		})
		if err := (ClientTemplates{Client: c}).Ensure(ctx, "ns", tmpl, true); err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{metav1.DryRunAll}, dryRun); diff != "" {
			t.Errorf("create options' dryRun (-want +got):\n%s", diff)
		}
	})
	t.Run("capacity dropped", func(t *testing.T) {
		c := fake.NewClientset()
		c.PrependReactor("create", "resourceclaimtemplates", func(a clienttesting.Action) (bool, runtime.Object, error) {
			obj := a.(clienttesting.CreateAction).GetObject().(*resourcev1.ResourceClaimTemplate)
			obj.Spec.Spec.Devices.Requests[0].Exactly.Capacity = nil // what a 1.34 API server does
			return false, nil, nil
		})
		err := (ClientTemplates{Client: c}).Ensure(ctx, "ns", tmpl, false)
		if err == nil || !strings.Contains(err.Error(), "DRAConsumableCapacity") || !strings.Contains(err.Error(), "1.36") {
			t.Errorf("err = %v, want one naming DRAConsumableCapacity and Kubernetes 1.36", err)
		}
		if _, err := get(c); err == nil {
			t.Error("the template without capacity is left behind")
		}
	})
}

// affinityPod returns a GPU pod whose required node affinity has one term
// per element of terms, each of those requirements.
func affinityPod(terms ...[]corev1.NodeSelectorRequirement) *corev1.Pod {
	p := util.MakePod("p").GPUMem(8).Obj()
	ns := &corev1.NodeSelector{}
	for _, reqs := range terms {
		ns.NodeSelectorTerms = append(ns.NodeSelectorTerms, corev1.NodeSelectorTerm{MatchExpressions: reqs})
	}
	p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: ns}}
	return p
}

// TestBoundForDRA: a pod is converted only when every node it may run on
// carries the DRA label: by its nodeSelector, or by each alternative term
// of its required node affinity.
func TestBoundForDRA(t *testing.T) {
	const key, value = "gpushare.io/device-mode", "dra"
	in := func(values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}
	}
	zone := corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"node selector", onDRANodes(util.MakePod("p").GPUMem(8).Obj()), true},
		{"another node selector value", func() *corev1.Pod {
			p := util.MakePod("p").GPUMem(8).Obj()
			p.Spec.NodeSelector = map[string]string{key: "device-plugin"}
			return p
		}(), false},
		{"nothing", util.MakePod("p").GPUMem(8).Obj(), false},
		{"one term asks the label", affinityPod([]corev1.NodeSelectorRequirement{in(value)}), true},
		{"with another requirement", affinityPod([]corev1.NodeSelectorRequirement{zone, in(value)}), true},
		{"every term asks it", affinityPod([]corev1.NodeSelectorRequirement{in(value)}, []corev1.NodeSelectorRequirement{zone, in(value)}), true},
		{"one term does not", affinityPod([]corev1.NodeSelectorRequirement{in(value)}, []corev1.NodeSelectorRequirement{zone}), false},
		{"another value allowed too", affinityPod([]corev1.NodeSelectorRequirement{in(value, "device-plugin")}), false},
		{"NotIn", affinityPod([]corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpNotIn, Values: []string{"device-plugin"}}}), false},
		{"Exists", affinityPod([]corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpExists}}), false},
		{"no terms", affinityPod(), false},
		{"In with no values", affinityPod([]corev1.NodeSelectorRequirement{in()}), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := boundForDRA(tc.pod, map[string]string{key: value}); got != tc.want {
				t.Errorf("boundForDRA = %v, want %v", got, tc.want)
			}
		})
	}

	// Two labels: the driver runs on nodes with both, the device plugin
	// on every other; a pod is bound for DRA nodes only when it asks both,
	// each by nodeSelector or by every affinity term.
	labels := map[string]string{key: value, "zone": "a"}
	both := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"node selector with both", func() *corev1.Pod {
			p := util.MakePod("p").GPUMem(8).Obj()
			p.Spec.NodeSelector = map[string]string{key: value, "zone": "a", "other": "x"}
			return p
		}(), true},
		{"node selector with one", onDRANodes(util.MakePod("p").GPUMem(8).Obj()), false},
		{"one by node selector, one by affinity", func() *corev1.Pod {
			p := affinityPod([]corev1.NodeSelectorRequirement{zone})
			p.Spec.NodeSelector = map[string]string{key: value}
			return p
		}(), true},
		{"both in every term", affinityPod([]corev1.NodeSelectorRequirement{in(value), zone}, []corev1.NodeSelectorRequirement{zone, in(value)}), true},
		{"a term without the second", affinityPod([]corev1.NodeSelectorRequirement{in(value), zone}, []corev1.NodeSelectorRequirement{in(value)}), false},
		{"nothing", util.MakePod("p").GPUMem(8).Obj(), false},
	}
	for _, tc := range both {
		t.Run("two labels/"+tc.name, func(t *testing.T) {
			if got := boundForDRA(tc.pod, labels); got != tc.want {
				t.Errorf("boundForDRA = %v, want %v", got, tc.want)
			}
		})
	}
	if boundForDRA(onDRANodes(util.MakePod("p").GPUMem(8).Obj()), nil) {
		t.Error("boundForDRA with no labels = true, want false")
	}
}

// TestInformerQuotas: InformerQuotas lists a namespace's quotas from the
// informer once it has synced, and says why it cannot before.
func TestInformerQuotas(t *testing.T) {
	ctx := context.Background()
	a, b := quota("a", "requests.cpu", "1"), quota("b", "requests.aliyun.com/gpu-mem", "16")
	other := quota("c", "requests.cpu", "1")
	other.Namespace = "team"
	factory := informers.NewSharedInformerFactory(fake.NewClientset(a, b, other), 0)
	q := NewInformerQuotas(factory)

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := q.List(cancelled, "default"); err == nil || !strings.Contains(err.Error(), "has not yet read the cluster's ResourceQuotas") {
		t.Errorf("List before the informer ran: %v, want an error saying it has not read the quotas", err)
	}

	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	got, err := q.List(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range got {
		names = append(names, q.Namespace+"/"+q.Name)
	}
	slices.Sort(names)
	if diff := cmp.Diff([]string{"default/a", "default/b"}, names); diff != "" {
		t.Errorf("quotas of default (-want +got):\n%s", diff)
	}
}
