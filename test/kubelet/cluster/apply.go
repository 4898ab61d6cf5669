package cluster

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/test/integration/framework"
)

// ApplyPods creates the Namespaces and Pods of a multi-document YAML file
// (a v1 List of them too), as `kubectl create -f` would; objects that
// exist already are left alone. Pods without a namespace go to "default".
// It returns the pods' namespace/name.
func ApplyPods(ctx context.Context, client kubernetes.Interface, path string) ([]string, error) {
	objs, err := framework.DecodeManifest(path)
	if err != nil {
		return nil, err
	}
	var pods []string
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.Namespace:
			_, err = client.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Pod:
			if o.Namespace == "" {
				o.Namespace = metav1.NamespaceDefault
			}
			pods = append(pods, o.Namespace+"/"+o.Name)
			_, err = client.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		default:
			return nil, fmt.Errorf("%s: only Namespaces and Pods are applied here, not %T (no controllers run in the demo)", path, obj)
		}
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating %T from %s: %w", obj, path, err)
		}
	}
	return pods, nil
}
