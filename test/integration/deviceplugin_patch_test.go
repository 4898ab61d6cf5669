package integration

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/deviceplugin"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/test/integration/framework"
	"github.com/gpushare/gpushare/test/util"
)

// TestDevicePluginPatchCarriesTheUID: a pod deleted and re-created under
// the same name. The device plugin's annotation patch meant for the old
// pod must not land on the new one; the real kube-apiserver refuses a
// patch whose metadata.uid differs from the stored pod's.
func TestDevicePluginPatchCarriesTheUID(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real control plane")
	}
	cp := framework.StartT(t, framework.Options{})
	admin := cp.Client(framework.AdminUser)
	ctx := context.Background()
	pods := admin.CoreV1().Pods("default")
	create := func() *corev1.Pod {
		t.Helper()
		p, err := pods.Create(ctx, util.MakePod("p").UID("").GPUMem(4).Obj(), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	old := create()
	if err := pods.Delete(ctx, "p", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	recreated := create()
	if old.UID == recreated.UID {
		t.Fatalf("the re-created pod has the old UID %s", old.UID)
	}

	api := deviceplugin.ClientAPI{Client: admin}
	assigned := "true"
	set := map[string]*string{gpushare.AnnotationAssigned: &assigned}
	err := api.PatchPodAnnotations(ctx, "default", "p", old.UID, set)
	t.Logf("patch for the deleted pod %s: %v", old.UID, err)
	// The annotator drops a patch refused this way (uidChanged): an
	// Invalid status with a cause on metadata.uid.
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Details == nil ||
		!slices.ContainsFunc(status.Status().Details.Causes, func(c metav1.StatusCause) bool { return c.Field == "metadata.uid" }) {
		t.Errorf("patch for the deleted pod: err = %v, want Invalid with a cause on metadata.uid", err)
	}
	got, err := pods.Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := got.Annotations[gpushare.AnnotationAssigned]; ok || got.UID != recreated.UID {
		t.Errorf("the new pod (UID %s, now %s) got %s=%q from a patch meant for the deleted pod", recreated.UID, got.UID, gpushare.AnnotationAssigned, v)
	}

	if err := api.PatchPodAnnotations(ctx, "default", "p", recreated.UID, set); err != nil {
		t.Fatalf("patch for the pod by its own UID: %v", err)
	}
	got, err = pods.Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := got.Annotations[gpushare.AnnotationAssigned]; v != "true" || got.UID != recreated.UID {
		t.Errorf("after the patch by its own UID: UID %s, %s=%q; want UID %s and \"true\"", got.UID, gpushare.AnnotationAssigned, v, recreated.UID)
	}
}
