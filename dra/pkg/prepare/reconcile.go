package prepare

import (
	"context"
	"errors"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/dra/pkg/devices"
)

// ClaimGetter reads a ResourceClaim from the API; APIClaims implements it.
type ClaimGetter interface {
	GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error)
}

// APIClaims is a ClaimGetter over a clientset.
type APIClaims struct{ Client kubernetes.Interface }

var _ ClaimGetter = APIClaims{}

// GetClaim reads ResourceClaim namespace/name.
func (a APIClaims) GetClaim(ctx context.Context, namespace, name string) (*resourceapi.ResourceClaim, error) {
	c, err := a.Client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading ResourceClaim %s/%s: %w", namespace, name, err)
	}
	return c, nil
}

// ClaimUsers tells whether a pod bound to the node, and not finished, uses
// a claim; nodepods.Watcher implements it.
type ClaimUsers interface {
	ClaimInUse(namespace, name string) bool
}

// Reconcile drops from the checkpoint the prepared claims that nothing can
// still use. The API no longer has the ResourceClaim, has another of its
// name, or no longer allocates it a device of this driver's pool. And no
// unfinished pod bound to the node uses it. Such a claim is left when
// kubelet lost its own record of the claims it prepared and so never
// unprepares it; it would otherwise keep its memory charged for ever.
// kube-controller-manager deallocates a claim only once every pod it is
// reserved for is done or gone. So a claim dropped this way has no running
// container, barring a pod deleted by force. A claim the API cannot be
// asked about now is kept. It returns the claims dropped.
func (s *State) Reconcile(ctx context.Context, api ClaimGetter, users ClaimUsers) ([]types.UID, error) {
	logger := klog.FromContext(ctx)
	claims := s.Prepared()
	var dropped []types.UID
	var errs []error
	for _, uid := range sortedUIDs(claims) {
		pc := claims[uid]
		why, err := s.stale(ctx, api, uid, pc.Namespace, pc.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if why == "" {
			continue
		}
		if users.ClaimInUse(pc.Namespace, pc.Name) {
			logger.V(2).Info("Keeping a prepared claim a pod on the node still uses", "claim", klog.KRef(pc.Namespace, pc.Name), "uid", uid, "reason", why)
			continue
		}
		if err := s.Unprepare(ctx, uid); err != nil {
			errs = append(errs, fmt.Errorf("dropping claim %s/%s (%s): %w", pc.Namespace, pc.Name, uid, err))
			continue
		}
		logger.Info("Dropped a prepared claim that kubelet never unprepared", "claim", klog.KRef(pc.Namespace, pc.Name), "uid", uid, "reason", why)
		dropped = append(dropped, uid)
	}
	return dropped, errors.Join(errs...)
}

// stale says why claim namespace/name of UID uid holds nothing of this
// driver's pool in the API; "" when it does.
func (s *State) stale(ctx context.Context, api ClaimGetter, uid types.UID, namespace, name string) (string, error) {
	c, err := api.GetClaim(ctx, namespace, name)
	switch {
	case apierrors.IsNotFound(err):
		return "the ResourceClaim is gone", nil
	case err != nil:
		return "", err
	case c.UID != uid:
		return fmt.Sprintf("the ResourceClaim of that name is another one (UID %s)", c.UID), nil
	case c.Status.Allocation == nil:
		return "the ResourceClaim is not allocated", nil
	}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == devices.DriverName && r.Pool == s.pool {
			return "", nil
		}
	}
	return "the ResourceClaim's allocation holds no device of pool " + s.pool, nil
}
