package feed

import (
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/gpushare/gpushare/pkg/allocator"
	"github.com/gpushare/gpushare/pkg/draview"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/kubeinfo"
)

// sliceNodeIndex indexes the ResourceSlice informer's store by node name.
// claimWholeCardIndex indexes the ResourceClaim informer's store by the
// nodes where the claim's results hold a whole card of the driver. Such a
// result has no consumed capacity, and the claim is charged the card's
// size, which the slices give.
const (
	sliceNodeIndex      = "node"
	claimWholeCardIndex = "wholeCardNode"
)

// EnableDRA also feeds the cache what the gpushare DRA driver leaves in
// the API, for the extender's node choice of claim pods. That is each
// node's cards from the driver's ResourceSlices (Cache.SetDRANode), and
// what each allocated ResourceClaim holds on them (Cache.UpsertClaim). Both
// are counted in unit, GiB or MiB: a card's memory rounded down, a claim's
// rounded up. Call it before Start. It needs list and watch on
// resourceslices and resourceclaims (resource.k8s.io/v1, Kubernetes 1.34 or
// newer).
func (f *Feeder) EnableDRA(unit string) error {
	if unit != gpushare.UnitGiB && unit != gpushare.UnitMiB {
		return fmt.Errorf("DRA memory unit %q: want %s or %s", unit, gpushare.UnitGiB, gpushare.UnitMiB)
	}
	f.draUnit = unit
	sliceInf := f.factory.Resource().V1().ResourceSlices().Informer()
	if err := sliceInf.AddIndexers(toolscache.Indexers{sliceNodeIndex: func(obj any) ([]string, error) {
		if s, ok := obj.(*resourcev1.ResourceSlice); ok && s.Spec.Driver == draview.DriverName && s.Spec.NodeName != nil {
			return []string{*s.Spec.NodeName}, nil
		}
		return nil, nil
	}}); err != nil {
		return fmt.Errorf("indexing ResourceSlices by node: %w", err)
	}
	f.slices = sliceInf.GetIndexer()
	sliceReg, err := sliceInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.sliceChanged(obj) },
		UpdateFunc: func(_, obj any) { f.sliceChanged(obj) },
		DeleteFunc: func(obj any) { f.sliceChanged(deleted(obj)) },
	})
	if err != nil {
		return fmt.Errorf("registering ResourceSlice handler: %w", err)
	}
	claimInf := f.factory.Resource().V1().ResourceClaims().Informer()
	if err := claimInf.AddIndexers(toolscache.Indexers{claimWholeCardIndex: func(obj any) ([]string, error) {
		cl, ok := obj.(*resourcev1.ResourceClaim)
		if !ok {
			return nil, nil
		}
		var nodes []string
		for _, s := range draview.Shares(cl) {
			if s.Bytes == 0 && !slices.Contains(nodes, s.Pool) {
				nodes = append(nodes, s.Pool)
			}
		}
		return nodes, nil
	}}); err != nil {
		return fmt.Errorf("indexing ResourceClaims by node: %w", err)
	}
	f.claims = claimInf.GetIndexer()
	claimReg, err := claimInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f.claimChanged(obj) },
		UpdateFunc: func(_, obj any) { f.claimChanged(obj) },
		DeleteFunc: func(obj any) {
			if cl, ok := deleted(obj).(*resourcev1.ResourceClaim); ok {
				f.cache.DeleteClaim(cl.UID)
			}
		},
	})
	if err != nil {
		return fmt.Errorf("registering ResourceClaim handler: %w", err)
	}
	f.synced = append(f.synced, sliceReg.HasSynced, claimReg.HasSynced)
	return nil
}

// sliceChanged applies the cards the driver now publishes for the node of
// slice obj. A slice of another driver, or of no node, changes nothing.
func (f *Feeder) sliceChanged(obj any) {
	s, ok := obj.(*resourcev1.ResourceSlice)
	if !ok || s.Spec.Driver != draview.DriverName || s.Spec.NodeName == nil {
		return
	}
	node := *s.Spec.NodeName
	cards := f.draCards(node)
	if err := f.cache.SetDRANode(node, f.draUnit, cards); err != nil {
		f.logger.Error(err, "Ignoring an invalid node annotation", "node", klog.KRef("", node))
	}
	// SetDRANode re-resolves the claims the cache holds on the node against
	// its new cards. A claim of a whole card is charged the card's size,
	// which only the slices say, so charge it again.
	objs, _ := f.claims.ByIndex(claimWholeCardIndex, node)
	for _, obj := range objs {
		f.claimChanged(obj)
	}
}

// draCards returns node's cards from the slices in the informer's store,
// in the feeder's unit, each card's Rank its place in the slices.
func (f *Feeder) draCards(node string) []allocator.Card {
	objs, _ := f.slices.ByIndex(sliceNodeIndex, node)
	list := make([]*resourcev1.ResourceSlice, 0, len(objs))
	for _, o := range objs {
		if s, ok := o.(*resourcev1.ResourceSlice); ok {
			list = append(list, s)
		}
	}
	found := draview.NodeCards(node, list)
	if len(found) == 0 {
		return nil
	}
	cards := make([]allocator.Card, 0, len(found))
	infos := make([]allocator.CardInfo, len(found)) // one allocation, read card after card
	var rank int32
	for i, c := range found {
		infos[i] = allocator.CardInfo{UUID: c.UUID, Model: c.Model, Isolation: c.Isolation}
		cards = append(cards, allocator.Card{Index: c.Index, Healthy: c.Healthy, Total: c.Bytes / draview.UnitBytes(f.draUnit), Rank: rank, Info: &infos[i]})
		rank++
	}
	return cards
}

// claimChanged charges claim obj's allocation, or forgets it when the
// claim holds nothing of the driver.
func (f *Feeder) claimChanged(obj any) {
	cl, ok := obj.(*resourcev1.ResourceClaim)
	if !ok {
		return
	}
	if info := f.claimInfo(cl); info != nil {
		f.cache.UpsertClaim(info)
		return
	}
	f.cache.DeleteClaim(cl.UID)
}

// claimInfo is what the cache charges for claim (UpsertClaim): a bound
// "pod" named after the claim, on the node of its pool. It has one
// container per device result of the driver; a result without consumed
// capacity holds the whole card. It is nil when the claim holds no device
// of the driver, or its results span several nodes.
func (f *Feeder) claimInfo(claim *resourcev1.ResourceClaim) *kubeinfo.PodInfo {
	shares := draview.Shares(claim)
	if len(shares) == 0 {
		return nil
	}
	node := shares[0].Pool
	info := &kubeinfo.PodInfo{Name: claim.Name, Namespace: claim.Namespace, UID: claim.UID, ResourceVersion: claim.ResourceVersion,
		NodeName: node, Phase: corev1.PodRunning, LegacyIndex: -1, StartTime: claim.CreationTimestamp.Time}
	alloc := &gpushare.Allocation{Node: node, Unit: f.draUnit}
	var cards []allocator.Card
	for k, s := range shares {
		idx, ok := draview.DeviceIndex(s.Device)
		if s.Pool != node || !ok {
			return nil
		}
		bytes := s.Bytes
		if bytes == 0 {
			if cards == nil {
				cards = f.draCards(node)
			}
			for _, c := range cards {
				if c.Index == idx {
					bytes = c.Total * draview.UnitBytes(f.draUnit)
				}
			}
		}
		units := draview.Units(bytes, f.draUnit)
		name := "device-" + strconv.Itoa(k)
		info.Demand = append(info.Demand, gpushare.ContainerDemand{Name: name, Units: units, Cards: 1})
		alloc.Containers = append(alloc.Containers, gpushare.ContainerAllocation{Name: name,
			Devices: []gpushare.DeviceShare{{Index: idx, Units: units}}})
	}
	info.Allocation = alloc
	// The workload model learns the claim with its pod's CPU and memory.
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			if pod, ok := f.Pod(claim.Namespace, r.Name); ok && pod.UID == r.UID {
				info.MilliCPU, info.MemoryMiB = pod.MilliCPU, pod.MemoryMiB
			}
			break
		}
	}
	return info
}

// Claim returns the informer's ResourceClaim namespace/name; ok is false
// when the informer does not hold it (yet), or EnableDRA was not called.
func (f *Feeder) Claim(namespace, name string) (*resourcev1.ResourceClaim, bool) {
	if f.claims == nil {
		return nil, false
	}
	obj, exists, err := f.claims.GetByKey(namespace + "/" + name)
	if err != nil || !exists {
		return nil, false
	}
	cl, ok := obj.(*resourcev1.ResourceClaim)
	return cl, ok
}

// DRAUnit is EnableDRA's unit, "" when it was not called.
func (f *Feeder) DRAUnit() string { return f.draUnit }
