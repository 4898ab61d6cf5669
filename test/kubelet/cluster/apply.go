package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// ApplyPods creates the Namespaces and Pods of a multi-document YAML file
// (a v1 List of them too), as `kubectl create -f` would; objects that
// exist already are left alone. Pods without a namespace go to "default".
// It returns the pods' namespace/name.
func ApplyPods(ctx context.Context, client kubernetes.Interface, path string) ([]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var objs []runtime.Object
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var raw runtime.RawExtension
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("decoding %s: %w", path, err)
		}
		if len(bytes.TrimSpace(raw.Raw)) == 0 {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(raw.Raw, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decoding an object of %s: %w", path, err)
		}
		if l, ok := obj.(*corev1.List); ok {
			for _, item := range l.Items {
				o, _, err := scheme.Codecs.UniversalDeserializer().Decode(item.Raw, nil, nil)
				if err != nil {
					return nil, fmt.Errorf("decoding a list item of %s: %w", path, err)
				}
				objs = append(objs, o)
			}
			continue
		}
		objs = append(objs, obj)
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
