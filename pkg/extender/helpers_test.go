package extender

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

func resourceQuantity(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func apierrorsConflict(pod *corev1.Pod) error {
	return apierrors.NewConflict(corev1.Resource("pods/binding"), pod.Name, nil)
}

func errorsInternal(msg string) error {
	return apierrors.NewInternalError(errString(msg))
}

type errString string

func (e errString) Error() string { return string(e) }

func ktestingLogger(t testing.TB) klog.Logger {
	logger, _ := ktesting.NewTestContext(t)
	return logger
}
