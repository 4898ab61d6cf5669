package webhook

import (
	"context"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpushare/gpushare/pkg/draclaim"
)

// FieldManager is the webhook's field manager for what it creates.
const FieldManager = "gpushare-webhook"

// ClientTemplates is Templates through the API. It creates a missing
// template, and accepts an existing one only with the same spec. It
// refuses one the API server stored without its capacity request, and
// deletes it again when it created it. That happens in a cluster whose
// DRAConsumableCapacity feature is off, by default Kubernetes before 1.36.
type ClientTemplates struct {
	Client kubernetes.Interface
}

// Ensure implements Templates.
func (c ClientTemplates) Ensure(ctx context.Context, namespace string, tmpl *resourcev1.ResourceClaimTemplate, dryRun bool) error {
	want := tmpl.DeepCopy()
	want.Namespace = namespace
	opts := metav1.CreateOptions{FieldManager: FieldManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	api := c.Client.ResourceV1().ResourceClaimTemplates(namespace)
	got, err := api.Create(ctx, want, opts)
	switch {
	case err == nil:
		if err := sameSpec(got, want); err != nil {
			if !dryRun {
				_ = api.Delete(ctx, want.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &got.UID}})
			}
			return err
		}
		return nil
	case apierrors.IsAlreadyExists(err):
		got, err := api.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading ResourceClaimTemplate %s/%s: %w", namespace, want.Name, err)
		}
		return sameSpec(got, want)
	default:
		return fmt.Errorf("creating ResourceClaimTemplate %s/%s: %w", namespace, want.Name, err)
	}
}

// sameSpec says how got, as stored, differs from want.
func sameSpec(got, want *resourcev1.ResourceClaimTemplate) error {
	if apiequality.Semantic.DeepEqual(got.Spec, want.Spec) {
		return nil
	}
	for _, r := range got.Spec.Spec.Devices.Requests {
		if r.Exactly != nil && (r.Exactly.Capacity == nil || len(r.Exactly.Capacity.Requests) == 0) {
			return fmt.Errorf("the API server stored ResourceClaimTemplate %s/%s without its capacity request %s: DRA consumable capacity (feature DRAConsumableCapacity) is off; sharing a card through DRA needs Kubernetes 1.36 or later",
				got.Namespace, got.Name, draclaim.MemoryCapacity)
		}
	}
	return fmt.Errorf("ResourceClaimTemplate %s/%s exists with a spec other than gpushare's; delete it and gpushare's webhook makes it again", got.Namespace, got.Name)
}
