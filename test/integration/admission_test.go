package integration

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/extender"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/nodeagent"
	"github.com/gpushare/gpushare/pkg/preemption"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// The admission policies of manifests/ and the service accounts they name.
const (
	annotationsPolicy     = "gpushare-annotations"
	nodeScopePolicy       = "gpushare-device-plugin-node-scope"
	extenderStatusPolicy  = "gpushare-extender-pod-status"
	annotationsPolicyFile = "manifests/admission/annotations-policy.yaml"
	extenderStatusFile    = "manifests/admission/extender-status-policy.yaml"
	nodeScopePolicyFile   = "manifests/deviceplugin/admission-policy.yaml"
	systemNamespace       = "kube-system"
	pluginAccount         = "gpushare-device-plugin"
	extenderAccount       = "gpushare-scheduler-extender"
	// nodeNameExtra is the user extra in which kube-apiserver reports the
	// node of a pod-bound service-account token (k8s.io/apiserver
	// pkg/authentication/serviceaccount NodeNameKey).
	nodeNameExtra = "authentication.kubernetes.io/node-name"
)

// applyManifests applies files, relative to the repository root, as the admin.
func applyManifests(t *testing.T, admin kubernetes.Interface, files ...string) {
	t.Helper()
	root, err := framework.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if err := framework.Apply(context.Background(), admin, filepath.Join(root, f)); err != nil {
			t.Fatal(err)
		}
	}
}

// waitEnforced waits until probe is refused by policy. When that never
// happens it reports an error and returns, so that the cases which follow
// show what went through.
func waitEnforced(t *testing.T, policy string, probe func(context.Context) error) {
	t.Helper()
	if err := framework.WaitPolicyEnforced(context.Background(), policy, 20*time.Second, probe); err != nil {
		t.Error(err)
	}
}

// waitAnnotationsPolicy waits until the annotations policy refuses a pod
// created with an allocation annotation (a dry run).
func waitAnnotationsPolicy(t *testing.T, admin kubernetes.Interface) {
	t.Helper()
	waitEnforced(t, annotationsPolicy, func(ctx context.Context) error {
		p := newPod("probe", "").Annotation(gpushare.AnnotationAllocation, "{}").Obj()
		_, err := admin.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

// newPod is a pod in "default" with one 4 GiB container, bound to node
// unless node is "".
func newPod(name, node string) *util.PodWrapper {
	p := util.MakePod(name).GPUMem(4).Node(node)
	p.Pod.UID = ""
	return p
}

// pluginPod is a pod of the device plugin's service account on node (none
// when ""), as the DaemonSet makes: its tokens carry the node claim.
func pluginPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: systemNamespace},
		Spec: corev1.PodSpec{
			ServiceAccountName: pluginAccount,
			NodeName:           node,
			Containers:         []corev1.Container{{Name: "device-plugin", Image: "gpushare-device-plugin:dev"}},
		},
	}
}

func createPods(t *testing.T, client kubernetes.Interface, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// tokenClient returns a clientset acting as service account
// kube-system/account with a token bound to nothing (no node claim).
func tokenClient(t *testing.T, cp *framework.ControlPlane, account string) kubernetes.Interface {
	t.Helper()
	kc, err := cp.ServiceAccountKubeconfig(context.Background(), systemNamespace, account, time.Hour)
	return kubeconfigClient(t, kc, err)
}

// podTokenClient returns a clientset acting as the device plugin's service
// account with a token bound to pod kube-system/pod, as the DaemonSet's.
func podTokenClient(t *testing.T, cp *framework.ControlPlane, pod string) kubernetes.Interface {
	t.Helper()
	kc, err := cp.PodServiceAccountKubeconfig(context.Background(), systemNamespace, pluginAccount, pod, time.Hour)
	return kubeconfigClient(t, kc, err)
}

func kubeconfigClient(t *testing.T, kubeconfig string, err error) kubernetes.Interface {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	c, err := deviceplugin.NewClient(kubeconfig, 100, 200)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// admissionCase is one request and what the policies must answer.
type admissionCase struct {
	name string
	do   func(context.Context) error
	// policy refuses the request with a message containing refusal; both
	// empty: the request is allowed.
	policy, refusal string
}

// runCases runs the cases in order (later ones may rely on the writes of
// earlier allowed ones).
func runCases(t *testing.T, cases []admissionCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.do(context.Background())
			switch {
			case tc.policy == "" && err != nil:
				t.Errorf("refused, want allowed: %v", err)
			case tc.policy == "":
			case err == nil:
				t.Errorf("allowed, want refused by %s with %q", tc.policy, tc.refusal)
			case !framework.RefusedBy(err, tc.policy) || !strings.Contains(err.Error(), tc.refusal):
				t.Errorf("err = %v\nwant a refusal by %s with %q", err, tc.policy, tc.refusal)
			default:
				t.Logf("refused: %v", err)
			}
		})
	}
}

var dryRun = []string{metav1.DryRunAll}

// patchPod merge-patches pod default/name (a dry run).
func patchPod(c kubernetes.Interface, name, body string, subresources ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.CoreV1().Pods("default").Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: dryRun}, subresources...)
		return err
	}
}

// patchNode merge-patches node name (a dry run).
func patchNode(c kubernetes.Interface, name, body string, subresources ...string) func(context.Context) error {
	return func(ctx context.Context) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: dryRun}, subresources...)
		return err
	}
}

// createEvent creates an event on pod default/on-a from host (a dry run).
func createEvent(c kubernetes.Interface, host string) func(context.Context) error {
	return func(ctx context.Context) error {
		ev := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "on-a.", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: "on-a"},
			Reason:         "GPUAllocationRepaired", Message: "test", Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: "gpushare-device-plugin", Host: host},
		}
		_, err := c.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{DryRun: dryRun})
		return err
	}
}

// TestPodBoundTokenCarriesNode checks what the node-scope policy relies
// on, on this kube-apiserver: a service-account token bound to a pod on a
// node authenticates with the node in the user's extra; one bound to an
// unscheduled pod, or to nothing, without.
func TestPodBoundTokenCarriesNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	cp := framework.StartT(t, framework.Options{})
	ctx := context.Background()
	admin := cp.Client(framework.AdminUser)
	applyManifests(t, admin, "manifests/deviceplugin/rbac.yaml")
	if err := createNode(ctx, admin, util.MakeNode("node-a").Obj()); err != nil {
		t.Fatal(err)
	}
	createPods(t, admin, pluginPod("plugin-a", "node-a"), pluginPod("plugin-pending", ""))
	tests := []struct {
		name string
		pod  string // the pod the token is bound to; "" for none
		want []string
	}{
		{"bound to a pod on node-a", "plugin-a", []string{"node-a"}},
		{"bound to an unscheduled pod", "plugin-pending", nil},
		{"bound to nothing", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tokenClient(t, cp, pluginAccount)
			if tt.pod != "" {
				c = podTokenClient(t, cp, tt.pod)
			}
			r, err := c.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			u := r.Status.UserInfo
			if u.Username != "system:serviceaccount:"+systemNamespace+":"+pluginAccount {
				t.Errorf("username %q", u.Username)
			}
			if got := []string(u.Extra[nodeNameExtra]); !slices.Equal(got, tt.want) {
				t.Errorf("extra %s = %q, want %q (all extra: %v)", nodeNameExtra, got, tt.want, u.Extra)
			}
		})
	}
}

// TestDevicePluginNodeScope applies the device plugin's manifests to a real
// kube-apiserver and checks that its service account, with a token bound
// to a pod on node-a, can make the plugin's writes for node-a and nothing
// else: not another node's pods or Node, not a spec, label or foreign
// annotation, and nothing without the node claim.
func TestDevicePluginNodeScope(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	cp := framework.StartT(t, framework.Options{})
	ctx := context.Background()
	admin := cp.Client(framework.AdminUser)
	applyManifests(t, admin, "manifests/deviceplugin/rbac.yaml", annotationsPolicyFile, nodeScopePolicyFile)
	// More than rbac.yaml grants, to show that the policy does not rely on
	// RBAC for what the plugin never does.
	grant(t, admin, "plugin-extra", rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: systemNamespace, Name: pluginAccount},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods", "nodes"}, Verbs: []string{"delete"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}})
	for _, n := range []string{"node-a", "node-b"} {
		node := util.MakeNode(n).Capacity(32, 2).Label(corev1.LabelTopologyZone, "a").Obj()
		// Someone else's taint, which the plugin's idle taint keeps.
		node.Spec.Taints = []corev1.Taint{{Key: "ops.example.com/drain", Effect: corev1.TaintEffectNoSchedule}}
		if err := createNode(ctx, admin, node); err != nil {
			t.Fatal(err)
		}
	}
	createPods(t, admin, pluginPod("plugin-a", "node-a"), pluginPod("plugin-pending", ""),
		newPod("on-a", "node-a").Obj(), newPod("on-b", "node-b").Obj(), newPod("pending", "").Obj())
	a, pendingToken, unbound := podTokenClient(t, cp, "plugin-a"), podTokenClient(t, cp, "plugin-pending"), tokenClient(t, cp, pluginAccount)
	api, nodes := deviceplugin.ClientAPI{Client: a}, nodeagent.ClientAPI{Client: a}
	waitEnforced(t, nodeScopePolicy, patchPod(unbound, "on-a", `{"metadata":{"annotations":{"ALIYUN_COM_GPU_MEM_ASSIGNED":"true"}}}`))

	onA, err := admin.CoreV1().Pods("default").Get(ctx, "on-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := (&gpushare.Allocation{Node: "node-a", Unit: "GiB", Containers: []gpushare.ContainerAllocation{
		{Name: "c0", Devices: []gpushare.DeviceShare{{Index: 1, UUID: "GPU-a-1", Units: 4}}},
	}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	inv, err := (&gpushare.Inventory{Unit: "GiB", Devices: []gpushare.Device{
		{Index: 0, UUID: "GPU-a-0", Model: "Tesla-T4", Memory: 16, Healthy: true},
		{Index: 1, UUID: "GPU-a-1", Model: "Tesla-T4", Memory: 16, Healthy: false},
	}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	const ann = `{"metadata":{"annotations":{"ALIYUN_COM_GPU_MEM_ASSIGNED":"true"}}}`
	runCases(t, []admissionCase{
		// The handoff's read of its node's pods when its informer lags
		// (rbac.yaml grants list; reads pass no admission).
		{name: "node-a: list its pods", do: func(ctx context.Context) error {
			pods, err := api.ListNodePods(ctx, "node-a")
			if err != nil {
				return err
			}
			var got []string
			for _, p := range pods {
				got = append(got, p.Namespace+"/"+p.Name)
			}
			slices.Sort(got)
			if want := []string{"default/on-a", systemNamespace + "/plugin-a"}; !slices.Equal(want, got) {
				return fmt.Errorf("listed %v, want %v", got, want)
			}
			return nil
		}},
		// The plugin's own writes, through its own client code (not dry runs).
		{name: "node-a pod: the handoff's annotations", do: func(ctx context.Context) error {
			return api.PatchPodAnnotations(ctx, "default", "on-a", onA.UID, map[string]*string{
				gpushare.AnnotationAllocation: &alloc, gpushare.AnnotationAssigned: ptr.To("true"),
				gpushare.AnnotationIndex: ptr.To("1"), gpushare.AnnotationDevMem: ptr.To("16"), gpushare.AnnotationPodMem: ptr.To("4"),
			})
		}},
		{name: "node-a pod: remove an annotation", do: func(ctx context.Context) error {
			return api.PatchPodAnnotations(ctx, "default", "on-a", onA.UID, map[string]*string{gpushare.AnnotationIndex: nil})
		}},
		{name: "node-a pod: annotations with a uid precondition", do: patchPod(a, "on-a",
			`{"metadata":{"uid":"`+string(onA.UID)+`","annotations":{"ALIYUN_COM_GPU_MEM_ASSIGNED":"false"}}}`)},
		{name: "node-a: inventory and labels", do: func(ctx context.Context) error {
			labels := map[string]*string{}
			for _, k := range append(slices.Clone(gpushare.OwnLabels), gpushare.NVIDIALabels...) {
				labels[k] = ptr.To("1")
			}
			return nodes.PatchNodeMetadata(ctx, "node-a", labels, map[string]*string{
				gpushare.AnnotationInventory: &inv, gpushare.AnnotationNVIDIALabels: ptr.To(`{"nvidia.com/gpu.count":"1"}`)})
		}},
		{name: "node-a: remove a label", do: func(ctx context.Context) error {
			return nodes.PatchNodeMetadata(ctx, "node-a", map[string]*string{gpushare.LabelDriver: nil}, nil)
		}},
		{name: "node-a: remove gpu-count", do: func(ctx context.Context) error {
			return nodes.PatchNodeCapacity(ctx, "node-a", map[corev1.ResourceName]*string{gpushare.ResourceGPUCount: nil})
		}},
		// The idle taint (IdleTaint, through its own client), beside a
		// taint of someone else's that it keeps.
		{name: "node-a: the idle taint", do: func(ctx context.Context) error {
			idle := &nodeagent.IdleTaint{API: nodes, Node: "node-a", Cards: 4, MinCards: 4, Pods: func() []*corev1.Pod { return nil }}
			changed, err := idle.Sync(ctx)
			if err == nil && !changed {
				err = errors.New("the taint was not added")
			}
			return err
		}},
		{name: "node-a: the idle taint removed", do: func(ctx context.Context) error {
			idle := &nodeagent.IdleTaint{API: nodes, Node: "node-a", Cards: 4, MinCards: 4, Pods: func() []*corev1.Pod { return nil }}
			if err := idle.Remove(ctx); err != nil {
				return err
			}
			_, err := idle.Sync(ctx) // back on for the check below
			return err
		}},
		{name: "event from node-a", do: createEvent(a, "node-a")},

		// Another node.
		{name: "node-b pod", do: patchPod(a, "on-b", ann), policy: nodeScopePolicy,
			refusal: "the gpushare device plugin of node node-a may only patch pods on that node; pods default/on-b is on node node-b"},
		{name: "unbound pod", do: patchPod(a, "pending", ann), policy: nodeScopePolicy, refusal: "pods default/pending is not bound to a node"},
		{name: "node-b: inventory", do: patchNode(a, "node-b", `{"metadata":{"annotations":{"gpushare.io/devices":"{}"}}}`),
			policy: nodeScopePolicy, refusal: "may only patch that node, not nodes node-b"},
		{name: "node-b: gpu-count", do: patchNode(a, "node-b", `{"status":{"capacity":{"aliyun.com/gpu-count":"9"}}}`, "status"),
			policy: nodeScopePolicy, refusal: "may only patch that node, not nodes/status node-b"},
		{name: "event from node-b", do: createEvent(a, "node-b"), policy: nodeScopePolicy,
			refusal: "may only record events with source.host node-a, not node-b"},

		// Its own node's objects, beyond its fields.
		{name: "node-a pod: a label", do: patchPod(a, "on-a", `{"metadata":{"labels":{"app":"x"}}}`),
			policy: nodeScopePolicy, refusal: "this request also changes metadata.labels"},
		{name: "node-a pod: spec", do: patchPod(a, "on-a", `{"spec":{"activeDeadlineSeconds":60}}`),
			policy: nodeScopePolicy, refusal: "this request also changes spec"},
		{name: "node-a pod: another annotation", do: patchPod(a, "on-a", `{"metadata":{"annotations":{"example.com/owner":"x"}}}`),
			policy: nodeScopePolicy, refusal: "this request also changes metadata.annotations.example.com/owner"},
		{name: "node-a pod: the extender's assume time", do: patchPod(a, "on-a", `{"metadata":{"annotations":{"ALIYUN_COM_GPU_MEM_ASSUME_TIME":"1"}}}`),
			policy: nodeScopePolicy, refusal: "also changes metadata.annotations.ALIYUN_COM_GPU_MEM_ASSUME_TIME"},
		{name: "node-a pod: status", do: patchPod(a, "on-a", `{"status":{"phase":"Failed"}}`, "status"),
			policy: nodeScopePolicy, refusal: "not UPDATE pods/status default/on-a"},
		{name: "node-a pod: delete", do: func(ctx context.Context) error {
			return a.CoreV1().Pods("default").Delete(ctx, "on-a", metav1.DeleteOptions{DryRun: dryRun})
		}, policy: nodeScopePolicy, refusal: "not DELETE pods default/on-a"},
		{name: "node-a: delete", do: func(ctx context.Context) error {
			return a.CoreV1().Nodes().Delete(ctx, "node-a", metav1.DeleteOptions{DryRun: dryRun})
		}, policy: nodeScopePolicy, refusal: "not DELETE nodes node-a"},
		{name: "node-a: a label", do: patchNode(a, "node-a", `{"metadata":{"labels":{"gpu":"big"}}}`),
			policy: nodeScopePolicy, refusal: "this request also changes metadata.labels.gpu"},
		{name: "node-a: GFD's timestamp label", do: patchNode(a, "node-a", `{"metadata":{"labels":{"nvidia.com/gfd.timestamp":"1"}}}`),
			policy: nodeScopePolicy, refusal: "this request also changes metadata.labels.nvidia.com/gfd.timestamp"},
		{name: "node-a: remove the zone label", do: patchNode(a, "node-a", `{"metadata":{"labels":{"topology.kubernetes.io/zone":null}}}`),
			policy: nodeScopePolicy, refusal: "this request also changes metadata.labels.topology.kubernetes.io/zone"},
		{name: "node-a: spec", do: patchNode(a, "node-a", `{"spec":{"unschedulable":true}}`),
			policy: nodeScopePolicy, refusal: "this request also changes spec.unschedulable"},
		{name: "node-a: another taint", do: patchNode(a, "node-a", `{"spec":{"taints":[{"key":"example.com/x","effect":"NoSchedule"},{"key":"gpushare.io/idle-gpus","effect":"PreferNoSchedule"},{"key":"ops.example.com/drain","effect":"NoSchedule"}]}}`),
			policy: nodeScopePolicy, refusal: "this request also changes spec.taints"},
		{name: "node-a: someone else's taint removed", do: patchNode(a, "node-a", `{"spec":{"taints":[{"key":"gpushare.io/idle-gpus","effect":"PreferNoSchedule"}]}}`),
			policy: nodeScopePolicy, refusal: "this request also changes spec.taints"},
		{name: "node-a: the idle taint as NoSchedule", do: patchNode(a, "node-a", `{"spec":{"taints":[{"key":"ops.example.com/drain","effect":"NoSchedule"},{"key":"gpushare.io/idle-gpus","effect":"NoSchedule"}]}}`),
			policy: nodeScopePolicy, refusal: "this request also changes spec.taints"},
		{name: "node-b: the idle taint", do: patchNode(a, "node-b", `{"spec":{"taints":[{"key":"gpushare.io/idle-gpus","effect":"PreferNoSchedule"}]}}`),
			policy: nodeScopePolicy, refusal: "may only patch that node, not nodes node-b"},
		{name: "node-a: cpu capacity", do: patchNode(a, "node-a", `{"status":{"capacity":{"cpu":"64"}}}`, "status"),
			policy: nodeScopePolicy, refusal: "this request also changes status.capacity.cpu"},
		{name: "node-a: gpu-mem allocatable", do: patchNode(a, "node-a", `{"status":{"allocatable":{"aliyun.com/gpu-mem":"64"}}}`, "status"),
			policy: nodeScopePolicy, refusal: "this request also changes status.allocatable.aliyun.com/gpu-mem"},
		{name: "node-a: conditions", do: patchNode(a, "node-a", `{"status":{"conditions":[{"type":"Ready","status":"False"}]}}`, "status"),
			policy: nodeScopePolicy, refusal: "this request also changes status.conditions"},

		// No node claim.
		{name: "unbound token", do: patchPod(unbound, "on-a", ann), policy: nodeScopePolicy, refusal: "token carries no node claim"},
		{name: "unbound token: inventory", do: patchNode(unbound, "node-a", `{"metadata":{"annotations":{"gpushare.io/devices":"{}"}}}`),
			policy: nodeScopePolicy, refusal: "token carries no node claim"},
		{name: "token of an unscheduled pod", do: patchPod(pendingToken, "on-a", ann), policy: nodeScopePolicy, refusal: "token carries no node claim"},

		// Others are not in scope.
		{name: "admin: node-b inventory", do: patchNode(admin, "node-b", `{"metadata":{"annotations":{"gpushare.io/devices":"{}"}}}`)},
	})

	// The allowed writes landed.
	got, err := admin.CoreV1().Pods("default").Get(ctx, "on-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{gpushare.AnnotationAllocation: alloc, gpushare.AnnotationAssigned: "true", gpushare.AnnotationDevMem: "16", gpushare.AnnotationPodMem: "4"}
	for k, v := range want {
		if got.Annotations[k] != v {
			t.Errorf("pod on-a annotation %s = %q, want %q", k, got.Annotations[k], v)
		}
	}
	if _, ok := got.Annotations[gpushare.AnnotationIndex]; ok {
		t.Errorf("pod on-a annotation %s not removed", gpushare.AnnotationIndex)
	}
	node, err := admin.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The plugin removes a gpu-count capacity (Publisher): the policy lets it.
	_, inC := node.Status.Capacity[gpushare.ResourceGPUCount]
	_, inA := node.Status.Allocatable[gpushare.ResourceGPUCount]
	if node.Annotations[gpushare.AnnotationInventory] != inv || inC || inA {
		t.Errorf("node-a: inventory %q, gpu-count in capacity %v, in allocatable %v; want the inventory and no gpu-count", node.Annotations[gpushare.AnnotationInventory], inC, inA)
	}
	wantTaints := []corev1.Taint{{Key: "ops.example.com/drain", Effect: corev1.TaintEffectNoSchedule}, {Key: gpushare.TaintIdleGPUs, Effect: corev1.TaintEffectPreferNoSchedule}}
	if diff := cmp.Diff(wantTaints, node.Spec.Taints); diff != "" {
		t.Errorf("node-a taints (-want +got):\n%s", diff)
	}
	if _, ok := node.Labels[gpushare.LabelDriver]; node.Labels[gpushare.LabelCount] != "1" || ok {
		t.Errorf("node-a labels %v: want %s=1 and no %s", node.Labels, gpushare.LabelCount, gpushare.LabelDriver)
	}
}

// TestAnnotationsPolicy checks that only the extender (on its Binding) and
// the device plugin write the allocation annotations, on a real
// kube-apiserver with the shipped policy.
func TestAnnotationsPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	// alice is an ordinary user who may create, patch and bind pods;
	// system:kube-scheduler is kube-scheduler's identity, with its default
	// role.
	cp := framework.StartT(t, framework.Options{Users: []framework.User{{Name: "alice"}, {Name: "system:kube-scheduler"}}})
	ctx := context.Background()
	admin := cp.Client(framework.AdminUser)
	applyManifests(t, admin, "manifests/extender/rbac.yaml", "manifests/deviceplugin/rbac.yaml", annotationsPolicyFile, nodeScopePolicyFile)
	grant(t, admin, "pod-writer", rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "alice"},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "patch"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/binding", "pods/status"}, Verbs: []string{"create", "patch"}})
	if err := createNode(ctx, admin, util.MakeNode("node-a").Capacity(32, 2).Obj()); err != nil {
		t.Fatal(err)
	}
	createPods(t, admin, pluginPod("plugin-a", "node-a"))
	alice, scheduler := cp.Client("alice"), cp.Client("system:kube-scheduler")
	for _, name := range []string{"by-extender", "by-alice", "by-scheduler", "by-scheduler-annotated", "plain"} {
		createPods(t, admin, newPod(name, "").Obj())
	}
	ext := extender.ClientPodAPI{Client: tokenClient(t, cp, extenderAccount)}
	plugin := podTokenClient(t, cp, "plugin-a")
	waitAnnotationsPolicy(t, admin)

	annotations := map[string]string{
		gpushare.AnnotationAllocation: `{"node":"node-a"}`, gpushare.AnnotationIndex: "0", gpushare.AnnotationPodMem: "4",
		gpushare.AnnotationDevMem: "16", gpushare.AnnotationAssigned: "false", gpushare.AnnotationAssumeTime: "1",
	}
	bind := func(c kubernetes.Interface, name string, annotations map[string]string) func(context.Context) error {
		return func(ctx context.Context) error {
			p, err := c.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			return extender.ClientPodAPI{Client: c}.Bind(ctx, "default", name, p.UID, "node-a", annotations)
		}
	}
	create := func(c kubernetes.Interface, p *corev1.Pod) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{DryRun: dryRun})
			return err
		}
	}
	copied := newPod("copied", "").Annotation(gpushare.AnnotationAllocation, `{"node":"node-a"}`).Obj()
	generated := newPod("", "").Annotation(gpushare.AnnotationPodMem, "4").Obj()
	generated.GenerateName = "train-"
	runCases(t, []admissionCase{
		// Creating pods.
		{name: "alice creates a pod with an allocation", do: create(alice, copied), policy: annotationsPolicy,
			refusal: "pod default/copied carries annotation gpushare.io/allocation: only the gpushare scheduler extender and device plugin set it; " +
				"remove it from the pod (a copy of a scheduled pod's YAML is the usual cause)"},
		{name: "alice creates a pod with ALIYUN_COM_GPU_MEM_POD", do: create(alice, generated), policy: annotationsPolicy,
			refusal: "carries annotation ALIYUN_COM_GPU_MEM_POD"},
		{name: "the admin creates a pod with an allocation", do: create(admin, copied), policy: annotationsPolicy,
			refusal: "carries annotation gpushare.io/allocation"},
		{name: "alice creates a pod with a policy annotation", do: create(alice, newPod("binpacked", "").Annotation(gpushare.AnnotationPolicy, "binpack").Obj())},

		// Binding.
		{name: "the extender binds with the annotations", do: func(ctx context.Context) error {
			p, err := alice.CoreV1().Pods("default").Get(ctx, "by-extender", metav1.GetOptions{})
			if err != nil {
				return err
			}
			return ext.Bind(ctx, "default", "by-extender", p.UID, "node-a", annotations)
		}},
		{name: "alice binds with the annotations", do: bind(alice, "by-alice", annotations), policy: annotationsPolicy,
			refusal: "alice may not bind pod default/by-alice with annotations"},
		{name: "kube-scheduler binds without annotations", do: bind(scheduler, "by-scheduler", nil)},
		{name: "kube-scheduler binds with the annotations", do: bind(scheduler, "by-scheduler-annotated", annotations), policy: annotationsPolicy,
			refusal: "system:kube-scheduler may not bind pod default/by-scheduler-annotated with annotations"},

		// Updating pods.
		{name: "alice changes the allocation", do: patchPod(alice, "by-extender", `{"metadata":{"annotations":{"gpushare.io/allocation":"{}"}}}`),
			policy: annotationsPolicy, refusal: "alice may not add, change or remove annotation gpushare.io/allocation of pod default/by-extender"},
		{name: "alice removes ALIYUN_COM_GPU_MEM_IDX", do: patchPod(alice, "by-extender", `{"metadata":{"annotations":{"ALIYUN_COM_GPU_MEM_IDX":null}}}`),
			policy: annotationsPolicy, refusal: "alice may not add, change or remove annotation ALIYUN_COM_GPU_MEM_IDX"},
		{name: "alice adds an allocation", do: patchPod(alice, "plain", `{"metadata":{"annotations":{"gpushare.io/allocation":"{}"}}}`),
			policy: annotationsPolicy, refusal: "annotation gpushare.io/allocation of pod default/plain"},
		{name: "alice adds an allocation through status", do: patchPod(alice, "plain", `{"metadata":{"annotations":{"gpushare.io/allocation":"{}"}}}`, "status"),
			policy: annotationsPolicy, refusal: "annotation gpushare.io/allocation of pod default/plain"},
		{name: "alice changes another annotation", do: patchPod(alice, "by-extender", `{"metadata":{"annotations":{"example.com/owner":"alice"}}}`)},
		{name: "the device plugin marks the pod assigned", do: patchPod(plugin, "by-extender", `{"metadata":{"annotations":{"ALIYUN_COM_GPU_MEM_ASSIGNED":"true"}}}`)},
	})

	// kube-apiserver copied the extender's Binding annotations into the pod.
	got, err := admin.CoreV1().Pods("default").Get(ctx, "by-extender", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range annotations {
		if got.Annotations[k] != v {
			t.Errorf("pod by-extender annotation %s = %q, want %q", k, got.Annotations[k], v)
		}
	}
}

// TestExtenderPodStatusPolicy applies the extender's RBAC and its pod
// status policy to a real kube-apiserver: the extender's own nomination
// and its clearing (preemption.ClientAPI.Nominate, as preemption writes them)
// pass; a status write of any other field by its account, which RBAC
// allows on every pod, is refused naming the field; other users are not
// in scope.
func TestExtenderPodStatusPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	cp := framework.StartT(t, framework.Options{})
	ctx := context.Background()
	admin := cp.Client(framework.AdminUser)
	applyManifests(t, admin, "manifests/extender/rbac.yaml", extenderStatusFile)
	if err := createNode(ctx, admin, util.MakeNode("node-a").Capacity(32, 2).Obj()); err != nil {
		t.Fatal(err)
	}
	createPods(t, admin, newPod("pending", "").Obj())
	ext := tokenClient(t, cp, extenderAccount)
	api := preemption.ClientAPI{Client: ext}
	waitEnforced(t, extenderStatusPolicy, patchPod(ext, "pending", `{"status":{"phase":"Failed"}}`, "status"))
	pending, err := admin.CoreV1().Pods("default").Get(ctx, "pending", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nominated := func(want string) func(context.Context) error {
		return func(ctx context.Context) error {
			p, err := admin.CoreV1().Pods("default").Get(ctx, "pending", metav1.GetOptions{})
			if err == nil && p.Status.NominatedNodeName != want {
				err = fmt.Errorf("nominatedNodeName %q, want %q", p.Status.NominatedNodeName, want)
			}
			return err
		}
	}
	const refusal = "the gpushare scheduler extender may only change a pod's status.nominatedNodeName; this write of pod default/pending also changes "
	runCases(t, []admissionCase{
		{name: "the extender nominates", do: func(ctx context.Context) error {
			return api.Nominate(ctx, "default", "pending", pending.UID, "node-a")
		}},
		{name: "the nomination landed", do: nominated("node-a")},
		{name: "the extender clears it", do: func(ctx context.Context) error {
			return api.Nominate(ctx, "default", "pending", pending.UID, "")
		}},
		{name: "the nomination cleared", do: nominated("")},

		{name: "a condition", do: patchPod(ext, "pending", `{"status":{"conditions":[{"type":"PodScheduled","status":"False"}]}}`, "status"),
			policy: extenderStatusPolicy, refusal: refusal + "status.conditions"},
		{name: "the phase", do: patchPod(ext, "pending", `{"status":{"phase":"Failed"}}`, "status"),
			policy: extenderStatusPolicy, refusal: refusal + "status.phase"},
		{name: "podIPs", do: patchPod(ext, "pending", `{"status":{"podIP":"10.0.0.9","podIPs":[{"ip":"10.0.0.9"}]}}`, "status"),
			policy: extenderStatusPolicy, refusal: "status.podIPs"},
		{name: "a nomination with a condition", do: patchPod(ext, "pending", `{"status":{"nominatedNodeName":"node-a","conditions":[{"type":"PodScheduled","status":"False"}]}}`, "status"),
			policy: extenderStatusPolicy, refusal: refusal + "status.conditions"},
		{name: "a label through status", do: patchPod(ext, "pending", `{"metadata":{"labels":{"app":"x"}}}`, "status"),
			policy: extenderStatusPolicy, refusal: refusal + "metadata.labels"},
		{name: "an annotation through status", do: patchPod(ext, "pending", `{"metadata":{"annotations":{"example.com/x":"y"}}}`, "status"),
			policy: extenderStatusPolicy, refusal: refusal + "metadata.annotations"},

		// Others are not in scope.
		{name: "admin: the phase", do: patchPod(admin, "pending", `{"status":{"phase":"Failed"}}`, "status")},
	})
}

// grant binds a new ClusterRole name with rules to subject.
func grant(t *testing.T, admin kubernetes.Interface, name string, subject rbacv1.Subject, rules ...rbacv1.PolicyRule) {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{subject},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRole %s: %v", name, err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ClusterRoleBinding %s: %v", name, err)
	}
}
