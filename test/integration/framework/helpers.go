package framework

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// CreateNamespace creates namespace name as the admin; one that already
// exists is fine.
func (cp *ControlPlane) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	_, err := cp.Client(AdminUser).CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return nil
}

// CreateNode creates n and then writes its status (the API ignores the
// status of a created Node), as a kubelet would: a Node without a kubelet
// that kube-scheduler places pods on.
func CreateNode(ctx context.Context, client kubernetes.Interface, n *corev1.Node) error {
	status := n.Status
	created, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating node %s: %w", n.Name, err)
	}
	created.Status = status
	if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("writing the status of node %s: %w", n.Name, err)
	}
	return nil
}

// DecodeManifest reads a multi-document YAML (or JSON) file and decodes
// each object with client-go's scheme, the items of a v1 List included, in
// file order. Empty documents are skipped.
func DecodeManifest(path string) ([]runtime.Object, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading manifest: %w", err)
	}
	decode := scheme.Codecs.UniversalDeserializer().Decode
	var objs []runtime.Object
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(bytes.TrimSpace(raw.Raw)) == 0 {
			continue
		}
		obj, _, err := decode(raw.Raw, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding an object of %s: %w", path, err)
		}
		l, ok := obj.(*corev1.List)
		if !ok {
			objs = append(objs, obj)
			continue
		}
		for _, item := range l.Items {
			o, _, err := decode(item.Raw, nil, nil)
			if err != nil {
				return nil, fmt.Errorf("decoding a list item of %s: %w", path, err)
			}
			objs = append(objs, o)
		}
	}
}

// Apply creates the objects of a multi-document YAML file (ServiceAccount,
// Lease, ClusterRole, ClusterRoleBinding, Role, RoleBinding, Namespace,
// ResourceQuota, ValidatingAdmissionPolicy and its Binding). It is for the
// project's own manifests, so an unknown kind is an error. kube-apiserver enforces a new admission policy a moment
// after it is created, not at once: tests that need it wait for a refusal.
func Apply(ctx context.Context, client kubernetes.Interface, path string) error {
	objs, err := DecodeManifest(path)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			_, err = client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *coordinationv1.Lease:
			_, err = client.CoordinationV1().Leases(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Namespace:
			_, err = client.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.ResourceQuota:
			_, err = client.CoreV1().ResourceQuotas(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRole:
			_, err = client.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.Role:
			_, err = client.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *rbacv1.RoleBinding:
			_, err = client.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicy:
			_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, o, metav1.CreateOptions{})
		case *admissionregistrationv1.ValidatingAdmissionPolicyBinding:
			_, err = client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, o, metav1.CreateOptions{})
		default:
			return fmt.Errorf("%s: Apply does not handle %T", path, obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating %T from %s: %w", obj, path, err)
		}
	}
	return nil
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as the
// service account namespace/name with a token from the TokenRequest API,
// valid for ttl (the API's minimum is 10 minutes), and returns its path.
// The token is bound to no object, so it carries no node claim.
func (cp *ControlPlane) ServiceAccountKubeconfig(ctx context.Context, namespace, name string, ttl time.Duration) (string, error) {
	return cp.serviceAccountKubeconfig(ctx, namespace, name, nil, ttl, "kubeconfig-sa-"+namespace+"-"+name)
}

// PodServiceAccountKubeconfig is ServiceAccountKubeconfig with the token
// bound to pod namespace/podName, which must exist and run as the service
// account, as kubelet's projected tokens are: kube-apiserver embeds the
// pod's spec.nodeName, and requests made with the token carry it as the
// user's extra "authentication.kubernetes.io/node-name" (an unbound pod
// gives none). The token stops working when the pod is deleted.
func (cp *ControlPlane) PodServiceAccountKubeconfig(ctx context.Context, namespace, name, podName string, ttl time.Duration) (string, error) {
	pod, err := cp.Client(AdminUser).CoreV1().Pods(namespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading pod %s/%s to bind a token to: %w", namespace, podName, err)
	}
	ref := &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	return cp.serviceAccountKubeconfig(ctx, namespace, name, ref, ttl, "kubeconfig-sa-"+namespace+"-"+name+"-pod-"+podName)
}

func (cp *ControlPlane) serviceAccountKubeconfig(ctx context.Context, namespace, name string, bound *authenticationv1.BoundObjectReference, ttl time.Duration, file string) (string, error) {
	expiry := int64(ttl / time.Second)
	tr, err := cp.Client(AdminUser).CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, BoundObjectRef: bound}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for service account %s/%s: %w", namespace, name, err)
	}
	path := filepath.Join(cp.dir, file)
	if err := cp.writeKubeconfig(path, "system:serviceaccount:"+namespace+":"+name, tr.Status.Token); err != nil {
		return "", err
	}
	return path, nil
}
