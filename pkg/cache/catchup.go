package cache

import (
	"math"
	"strconv"

	"k8s.io/apimachinery/pkg/types"

	"github.com/gpushare/gpushare/pkg/inspectapi"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// CatchUp is one catch-up (BeginCatchUp). While it is the cache's current
// one, it records the informer events applied meanwhile, so a quorum-listed
// pod older than them is not applied over them. Catch-ups may overlap: a
// lease flap starts a new term's before the old one's list is applied. A
// catch-up that a newer one replaced applies nothing more, and its end
// changes nothing, as the newer one lists every bound pod again.
type CatchUp struct {
	// applied: pod UID -> resourceVersion of the last informer event
	// applied during the catch-up; math.MaxUint64 for a delete.
	applied map[types.UID]uint64
}

// resourceVersion parses a pod's resourceVersion; ok is false when it is
// not a decimal integer. etcd's revisions are, and compare as integers.
// Another storage's may not be, and then no ordering is enforced.
func resourceVersion(s string) (rv uint64, ok bool) {
	rv, err := strconv.ParseUint(s, 10, 64)
	return rv, err == nil
}

// BeginCatchUp starts a catch-up, replacing any still running: pods from a
// quorum list of the API are about to be applied with ApplyQuorum. A new
// leader runs one before it places pods. So the Bindings the previous
// leader made, which this replica's lagging informer has not delivered
// yet, are charged (see pkg/leader).
func (c *Cache) BeginCatchUp() *CatchUp {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.catchUp = &CatchUp{applied: map[types.UID]uint64{}}
	return c.catchUp
}

// EndCatchUp ends cu, if it is still the current catch-up.
func (c *Cache) EndCatchUp(cu *CatchUp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.catchUp == cu {
		c.catchUp = nil
	}
}

// ApplyQuorum applies a pod that a quorum list of the API read during
// catch-up cu. It does nothing if an informer event applied a newer version
// of the pod, or its delete, since cu began, or if cu is no longer the
// current catch-up. The pod's resourceVersion becomes its floor. Older
// informer events of it, a lagging watch delivering the pod as still
// pending, are ignored until the informer reaches it.
func (c *Cache) ApplyQuorum(cu *CatchUp, pod *kubeinfo.PodInfo) {
	rv, ok := resourceVersion(pod.ResourceVersion)
	c.report(c.locked(func() []inspectapi.Ignored {
		if c.catchUp != cu || cu == nil {
			return nil
		}
		if seen, applied := cu.applied[pod.UID]; applied && (!ok || seen >= rv) {
			return nil
		}
		if ok {
			c.floor[pod.UID] = rv
		}
		return c.upsert(pod, true)
	}))
}

// stale reports whether an informer event of pod is older than the version
// a catch-up applied, and records the event for a catch-up in progress.
// The caller holds c.mu.
func (c *Cache) stale(pod *kubeinfo.PodInfo) bool {
	rv, ok := resourceVersion(pod.ResourceVersion)
	if !ok {
		return false
	}
	if floor, has := c.floor[pod.UID]; has {
		if rv < floor {
			return true
		}
		delete(c.floor, pod.UID) // the informer has caught up with this pod
	}
	if c.catchUp != nil {
		c.catchUp.applied[pod.UID] = rv
	}
	return false
}

// deleted records a pod's delete for a catch-up in progress and drops its
// floor. The caller holds c.mu.
func (c *Cache) deleted(uid types.UID) {
	delete(c.floor, uid)
	if c.catchUp != nil {
		c.catchUp.applied[uid] = math.MaxUint64
	}
}
