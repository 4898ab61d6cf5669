package webhook

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpushare/gpushare/pkg/gpushare"
)

// The ResourceQuota names of GPU memory: aliyun.com/gpu-mem pods count
// under the first, and pods converted with the marker under the second.
// ResourceQuota counts an extended resource only under "requests.".
var (
	quotaGPUMem   = corev1.ResourceName(corev1.DefaultResourceRequestsPrefix + string(gpushare.ResourceGPUMem))
	quotaDRAClaim = corev1.ResourceName(corev1.DefaultResourceRequestsPrefix + string(gpushare.ResourceDRAClaim))
)

// quotaWait bounds how long an admission waits for the ResourceQuota
// informer's first sync. It is well inside the webhook's timeoutSeconds
// (5).
const quotaWait = 2 * time.Second

// Quotas lists ResourceQuotas.
type Quotas interface {
	// List returns the ResourceQuotas of namespace, waiting for the
	// first sync of the cluster's quotas until ctx ends.
	List(ctx context.Context, namespace string) ([]*corev1.ResourceQuota, error)
}

// InformerQuotas is Quotas from a shared informer, so that an admission
// makes no API call.
type InformerQuotas struct {
	Lister corelisters.ResourceQuotaLister
	Synced cache.InformerSynced
}

var _ Quotas = InformerQuotas{}

// NewInformerQuotas adds a ResourceQuota informer to factory. Start the
// factory to fill it.
func NewInformerQuotas(factory informers.SharedInformerFactory) InformerQuotas {
	inf := factory.Core().V1().ResourceQuotas()
	return InformerQuotas{Lister: inf.Lister(), Synced: inf.Informer().HasSynced}
}

// List implements Quotas.
func (q InformerQuotas) List(ctx context.Context, namespace string) ([]*corev1.ResourceQuota, error) {
	if err := wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(context.Context) (bool, error) {
		return q.Synced(), nil
	}); err != nil {
		return nil, fmt.Errorf("the webhook has not yet read the cluster's ResourceQuotas, so it cannot tell whether the pod's GPU memory would escape one; retry: %w", err)
	}
	list, err := q.Lister.ResourceQuotas(namespace).List(labels.Everything())
	if err != nil {
		return nil, fmt.Errorf("listing the ResourceQuotas of namespace %s: %w", namespace, err)
	}
	return list, nil
}

// checkQuotas refuses a conversion that the namespace's ResourceQuotas
// would not count; units (in unit) is what the pod asks. ResourceQuota
// admission runs after every mutating webhook, so it sees the converted
// pod. That pod has no aliyun.com/gpu-mem left, and DRA's own quota counts
// devices, not memory. With NodeChoice the marker carries the memory
// (draclaim.Convert). So each quota that limits requests.aliyun.com/gpu-mem
// must limit requests.gpushare.io/dra-claim too. Without NodeChoice nothing
// on the pod counts the memory, so no quota may limit either. Scopes are
// not weighed: a quota that names gpu-mem is taken to apply.
func (d DRA) checkQuotas(ctx context.Context, namespace string, units int64) error {
	ctx, cancel := context.WithTimeout(ctx, quotaWait)
	defer cancel()
	quotas, err := d.Quotas.List(ctx, namespace)
	if err != nil {
		return err
	}
	slices.SortFunc(quotas, func(a, b *corev1.ResourceQuota) int { return strings.Compare(a.Name, b.Name) })
	for _, q := range quotas {
		mem, limitsMem := q.Spec.Hard[quotaGPUMem]
		claim, limitsClaim := q.Spec.Hard[quotaDRAClaim]
		ref := namespace + "/" + q.Name
		switch {
		case d.NodeChoice && limitsMem && !limitsClaim:
			return fmt.Errorf("ResourceQuota %s limits %s to %s but not %s, under which pods converted to DRA claims count their GPU memory: "+
				"this pod's %d %s would escape it; add %s (in %s, like %s) to ResourceQuota %s (docs/dra.md#quotas)",
				ref, quotaGPUMem, mem.String(), quotaDRAClaim, units, d.Unit, quotaDRAClaim, d.Unit, gpushare.ResourceGPUMem, ref)
		case !d.NodeChoice && (limitsMem || limitsClaim):
			name, hard := quotaGPUMem, mem
			if !limitsMem {
				name, hard = quotaDRAClaim, claim
			}
			return fmt.Errorf("ResourceQuota %s limits %s to %s, and without the extender's node choice (--dra-node-choice) a pod converted to a DRA claim carries nothing a quota counts its GPU memory by: "+
				"this pod's %d %s would escape it; run the extender with --dra-node-choice (the chart does with draDriver.enabled) and limit %s in the quota (docs/dra.md#quotas)",
				ref, name, hard.String(), units, d.Unit, quotaDRAClaim)
		}
	}
	return nil
}
