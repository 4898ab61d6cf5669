package chart

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"

	"github.com/gpushare/gpushare/test/integration/framework"
)

// optionalCRDs are the custom resources the chart uses when asked
// (ServiceMonitor and PodMonitor of prometheus-operator, cert-manager's
// Issuer and Certificate). The test apiserver has none, so minimal
// definitions are installed: the right group, version, kind and scope, and
// a schema that keeps every field. So for these kinds the dry run proves
// the API identity and the metadata, not the spec (the operators' own
// schemas are not vendored here).
var optionalCRDs = []struct{ group, kind, plural string }{
	{"monitoring.coreos.com", "ServiceMonitor", "servicemonitors"},
	{"monitoring.coreos.com", "PodMonitor", "podmonitors"},
	{"cert-manager.io", "Issuer", "issuers"},
	{"cert-manager.io", "Certificate", "certificates"},
}

func installOptionalCRDs(ctx context.Context, t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	for _, c := range optionalCRDs {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1",
			"kind":       "CustomResourceDefinition",
			"metadata":   map[string]any{"name": c.plural + "." + c.group},
			"spec": map[string]any{
				"group": c.group,
				"scope": "Namespaced",
				"names": map[string]any{"kind": c.kind, "plural": c.plural, "singular": strings.ToLower(c.kind), "listKind": c.kind + "List"},
				"versions": []any{map[string]any{
					"name": "v1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
				}},
			},
		}}
		if _, err := crds.Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			t.Fatalf("installing the minimal CRD %s: %v", obj.GetName(), err)
		}
	}
}

// dryRunAll creates every object of r with dryRun=All and strict field
// validation, and returns one error line per rejection.
func dryRunAll(ctx context.Context, r Rendering, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper) []string {
	var errs []string
	for _, doc := range r.Docs {
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(mustJSON(doc)); err != nil {
			errs = append(errs, fmt.Sprintf("decoding %s: %v", firstLine(doc), err))
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s %s: no such API: %v", gvk, obj.GetName(), err))
			continue
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == "namespace" {
			ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		if _, err := ri.Create(ctx, obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: metav1.FieldValidationStrict}); err != nil {
			errs = append(errs, fmt.Sprintf("%s %s/%s: %v", gvk.Kind, obj.GetNamespace(), obj.GetName(), err))
		}
	}
	return errs
}

func mustJSON(doc string) []byte {
	j, err := yamlToJSON(doc)
	if err != nil {
		return []byte("{}")
	}
	return j
}

func firstLine(s string) string { return strings.SplitN(s, "\n", 2)[0] }

// TestDryRunEveryCombination renders every combination and creates each
// object on a real kube-apiserver (v1.34.3) with server-side dry run and
// strict field validation: any rejection fails. The built-in
// ClusterRole the chart binds exists there and grants no Secrets. Then,
// with lookup reading that apiserver, the Helm-generated certificates
// behave as documented: the webhook's are new at each upgrade with the
// previous CA kept in caBundle; the extender topology's are kept; and a
// Lease that an elector made before the chart made its Leases is left out,
// one of this release kept.
func TestDryRunEveryCombination(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	ctx := context.Background()
	cp := framework.StartT(t, framework.Options{})
	cfg := cp.RESTConfig(framework.AdminUser)
	dyn := dynamic.NewForConfigOrDie(cfg)
	installOptionalCRDs(ctx, t, dyn)
	dc := discovery.NewDiscoveryClientForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	// The CRDs are served a moment after they are created.
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		mapper.Reset()
		for _, c := range optionalCRDs {
			if _, err := mapper.RESTMapping(schema.GroupKind{Group: c.group, Kind: c.kind}, "v1"); err != nil {
				return false, nil
			}
		}
		return true, nil
	}); err != nil {
		t.Fatalf("the minimal CRDs are never served: %v", err)
	}

	c := load(t)
	for _, combo := range Combos() {
		r := render(t, c, combo.Values)
		for _, e := range dryRunAll(ctx, r, dyn, mapper) {
			t.Errorf("%s: %s", combo.Name, e)
		}
	}

	admin := kubernetes.NewForConfigOrDie(cfg)
	for _, role := range []string{"system:volume-scheduler"} {
		cr, err := admin.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the built-in role the chart binds: %v", err)
		}
		for _, rule := range cr.Rules {
			for _, res := range rule.Resources {
				if res == "secrets" || res == "*" {
					t.Errorf("%s grants %v on %s", role, rule.Verbs, res)
				}
			}
		}
	}

	t.Run("webhook certificates rotate on upgrade, caBundle keeps the previous CA", func(t *testing.T) {
		first := render(t, c, nil)
		secret := secretOf(t, first, "gpushare-webhook-tls")
		if _, err := admin.CoreV1().Secrets(Release.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		upgraded, err := Render(c, nil, cfg)
		if err != nil {
			t.Fatal(err)
		}
		newSecret := secretOf(t, upgraded, "gpushare-webhook-tls")
		if string(newSecret.Data["ca.crt"]) == string(secret.Data["ca.crt"]) {
			t.Errorf("the upgrade kept the webhook CA; want a new one")
		}
		mwc := find(objects(t, upgraded), "MutatingWebhookConfiguration", "gpushare-scheduler-name")
		bundle := decodeB64(t, field(mwc, "webhooks").([]any)[0].(map[string]any)["clientConfig"].(map[string]any)["caBundle"].(string))
		got := subjects(t, bundle)
		if len(got) != 2 || !strings.Contains(string(bundle), strings.TrimSpace(string(secret.Data["ca.crt"]))) ||
			!strings.Contains(string(bundle), strings.TrimSpace(string(newSecret.Data["ca.crt"]))) {
			t.Errorf("caBundle after the upgrade holds %v; want the new CA and the previous one", got)
		}
	})

	t.Run("a Lease an elector made is left out, this release's kept", func(t *testing.T) {
		holder := "gpushare-scheduler-6d4f_0b1c"
		made := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gpushare-scheduler"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder}}
		ours := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "gpushare-scheduler-extender",
			Annotations: map[string]string{"meta.helm.sh/release-name": Release.Name, "meta.helm.sh/release-namespace": Release.Namespace}}}
		for _, l := range []*coordinationv1.Lease{made, ours} {
			if _, err := admin.CoordinationV1().Leases(Release.Namespace).Create(ctx, l, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for _, tc := range []struct {
			values map[string]any
			lease  string
			want   bool
		}{
			{values: nil, lease: made.Name, want: false},
			{values: map[string]any{"topology": "extender"}, lease: ours.Name, want: true},
		} {
			upgraded, err := Render(c, tc.values, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if got := find(objects(t, upgraded), "Lease", tc.lease) != nil; got != tc.want {
				t.Errorf("values %v: the Lease %s rendered: %v, want %v", tc.values, tc.lease, got, tc.want)
			}
		}
	})

	t.Run("extender certificates are kept on upgrade", func(t *testing.T) {
		values := map[string]any{"topology": "extender"}
		first := render(t, c, values)
		for _, name := range []string{"gpushare-extender-tls", "gpushare-scheduler-client-tls"} {
			if _, err := admin.CoreV1().Secrets(Release.Namespace).Create(ctx, secretOf(t, first, name), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		upgraded, err := Render(c, values, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"gpushare-extender-tls", "gpushare-scheduler-client-tls"} {
			if a, b := secretOf(t, first, name), secretOf(t, upgraded, name); string(a.Data["tls.crt"]) != string(b.Data["tls.crt"]) || string(a.Data["ca.crt"]) != string(b.Data["ca.crt"]) {
				t.Errorf("the upgrade replaced %s; want it kept", name)
			}
		}
	})
}

// secretOf is the rendered Secret name, decoded.
func secretOf(t *testing.T, r Rendering, name string) *corev1.Secret {
	t.Helper()
	o := find(objects(t, r), "Secret", name)
	if o == nil {
		t.Fatalf("no Secret %s rendered", name)
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Release.Namespace}, Type: corev1.SecretTypeTLS, Data: map[string][]byte{}}
	for k, v := range field(o, "data").(map[string]any) {
		s.Data[k] = decodeB64(t, v.(string))
	}
	return s
}

func decodeB64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// subjects are the subjects of the certificates of a PEM bundle.
func subjects(t *testing.T, bundle []byte) []string {
	t.Helper()
	var out []string
	for {
		var b *pem.Block
		b, bundle = pem.Decode(bundle)
		if b == nil {
			return out
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cert.Subject.String()+" serial "+cert.SerialNumber.String())
	}
}
