package feed

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// catchUpPageSize is how many pods one page of the catch-up's list holds.
const catchUpPageSize = 500

// CatchUp reads every pod bound to a node and not finished with a quorum
// list, and applies it to the cache (Cache.ApplyQuorum), page by page. The
// list's resourceVersion "" reads etcd's current state, not a watch cache.
// When CatchUp returns nil, every Binding the API server made before the
// list began is charged, however far behind the informer is. pkg/leader
// says who calls it and why.
func (f *Feeder) CatchUp(ctx context.Context) (pods int, err error) {
	cu := f.cache.BeginCatchUp()
	defer f.cache.EndCatchUp(cu)
	opts := metav1.ListOptions{
		FieldSelector: "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed",
		Limit:         catchUpPageSize,
	}
	for {
		list, err := f.client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
		if err != nil {
			return pods, fmt.Errorf("listing bound pods from the API (quorum read): %w", err)
		}
		for i := range list.Items {
			f.cache.ApplyQuorum(cu, kubeinfo.NewPodInfo(&list.Items[i]))
		}
		pods += len(list.Items)
		if list.Continue == "" {
			return pods, nil
		}
		opts.Continue = list.Continue
	}
}
