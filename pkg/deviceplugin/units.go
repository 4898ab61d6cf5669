package deviceplugin

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
	"github.com/gpushare/gpushare/pkg/handoff"
)

// Card is a card as the plugin advertises it (handoff.Card).
type Card = handoff.Card

// CardsOf converts discovered devices to cards in unit. It fails on no
// cards, or on a card smaller than one unit.
func CardsOf(node string, devs []gpu.Device, unit string) ([]Card, error) {
	if len(devs) == 0 {
		return nil, fmt.Errorf("no GPUs found on node %s", node)
	}
	var cards []Card
	for _, d := range devs {
		u := Units(d.MemoryMiB, unit)
		if u < 1 {
			return nil, fmt.Errorf("GPU %d (%s) on node %s has %d MiB, less than one %s; use --memory-unit MiB", d.Index, d.UUID, node, d.MemoryMiB, unit)
		}
		cards = append(cards, Card{Card: d.Card, Units: u})
	}
	return cards, nil
}

// KubeletMaxMessageBytes is the largest gRPC message kubelet accepts from a
// device plugin: it dials plugins with grpc-go's default receive limit,
// 4 MiB. A ListAndWatch response over it never arrives, and kubelet marks
// the resource unhealthy.
const KubeletMaxMessageBytes = 4 << 20

// Units returns memMiB in unit, rounded down so that a card is never
// advertised with more memory than it has. Example: a Tesla T4 reports
// 15360 MiB, which is 15 GiB (not 16).
func Units(memMiB int64, unit string) int64 {
	if unit == gpushare.UnitMiB {
		return memMiB
	}
	return memMiB / 1024
}

// MiB returns units of unit in MiB: 8 GiB is 8192 MiB.
func MiB(units int64, unit string) int64 {
	if unit == gpushare.UnitMiB {
		return units
	}
	return units * 1024
}

// ListAndWatchBytes returns the size in bytes of the largest ListAndWatch
// response for these cards in unit: one device per unit, every one
// "Unhealthy", which is longer than "Healthy". Example: one 16 GiB card with
// a 40-byte UUID in GiB is 16 devices of ID "GPU-…::0".."GPU-…::15", about
// 16 × 60 bytes; the same card in MiB is 16384 devices, about 1 MiB.
func ListAndWatchBytes(devs []gpu.Device, unit string) int64 {
	var total int64
	for _, d := range devs {
		total += unitsBytes(Units(d.MemoryMiB, unit), int64(len(d.UUID)+len(handoff.IDSeparator)))
	}
	return total
}

// unitsBytes sums the encoded size of n device entries whose IDs are
// prefix bytes followed by the decimal numbers 0..n-1.
func unitsBytes(n, prefix int64) int64 {
	var total int64
	lo := int64(0)
	for digits := int64(1); lo < n; digits++ {
		hi := min(n, pow10(digits))
		total += (hi - lo) * deviceEntryBytes(prefix+digits)
		lo = hi
	}
	return total
}

// deviceEntryBytes is the encoded size of one repeated Device field of a
// ListAndWatchResponse with an ID of idLen bytes and Health "Unhealthy".
func deviceEntryBytes(idLen int64) int64 {
	dev := int64(protowire.SizeTag(1)) + int64(protowire.SizeBytes(int(idLen))) +
		int64(protowire.SizeTag(2)) + int64(protowire.SizeBytes(len(pluginapi.Unhealthy)))
	return int64(protowire.SizeTag(1)) + int64(protowire.SizeBytes(int(dev)))
}

func pow10(n int64) int64 {
	p := int64(1)
	for ; n > 0; n-- {
		p *= 10
	}
	return p
}

// CheckMessageSize returns an error naming a unit that fits when the
// ListAndWatch response for devs in unit would pass kubelet's limit.
func CheckMessageSize(node string, devs []gpu.Device, unit string) error {
	size := ListAndWatchBytes(devs, unit)
	if size < KubeletMaxMessageBytes {
		return nil
	}
	var count int64
	for _, d := range devs {
		count += Units(d.MemoryMiB, unit)
	}
	msg := fmt.Sprintf("--memory-unit %s would advertise %d %s devices on node %s in a ListAndWatch message of %s, over kubelet's %s gRPC limit",
		unit, count, gpushare.ResourceGPUMem, node, humanBytes(size), humanBytes(KubeletMaxMessageBytes))
	if unit != gpushare.UnitGiB {
		if g := ListAndWatchBytes(devs, gpushare.UnitGiB); g < KubeletMaxMessageBytes {
			return fmt.Errorf("%s; use --memory-unit %s (%s)", msg, gpushare.UnitGiB, humanBytes(g))
		}
	}
	return fmt.Errorf("%s; no unit fits: advertise fewer cards on this node", msg)
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}

// maxNamedPods is how many pods an error names before it counts the rest.
const maxNamedPods = 10

// CheckUnitChange refuses to start in unit when the node's published
// inventory, gpushare.io/devices, is in another unit and kubelet's
// PodResources lists containers holding aliyun.com/gpu-mem IDs. Those IDs
// were handed out in the old unit. Read in the new one they would mean
// other amounts: "UUID::3" is the fourth GiB, or the fourth MiB. kubelet's
// accounting of the cards would no longer hold. A change on an idle node,
// or a node never published, is allowed; the first is logged.
func CheckUnitChange(ctx context.Context, api NodeGetter, kubelet handoff.KubeletPods, nodeName, unit string) error {
	node, err := api.GetNode(ctx, nodeName)
	if err != nil {
		return fmt.Errorf("reading node %s to compare its published unit: %w", nodeName, err)
	}
	s, ok := node.Annotations[gpushare.AnnotationInventory]
	if !ok {
		return nil
	}
	logger := klog.FromContext(ctx)
	inv, err := gpushare.ParseInventory(s)
	if err != nil {
		logger.Info("The node's published inventory is unreadable; its unit cannot be compared, and it will be replaced", "err", err)
		return nil
	}
	if inv.Unit == unit {
		return nil
	}
	pods, err := kubelet.List(ctx)
	if err != nil {
		return fmt.Errorf("node %s: --memory-unit %s, but its devices were published in %s, and whether containers still hold %s devices cannot be told: %w; "+
			"start the plugin when kubelet's PodResources answers, or with --memory-unit %s", nodeName, unit, inv.Unit, inv.Unit, err, inv.Unit)
	}
	var holding []string
	for _, p := range pods {
		for _, ids := range p.Containers {
			if len(ids) > 0 {
				holding = append(holding, p.Namespace+"/"+p.Name)
				break
			}
		}
	}
	if len(holding) == 0 {
		logger.Info("Memory unit changed on a node where no container holds devices", "from", inv.Unit, "to", unit)
		return nil
	}
	sort.Strings(holding)
	named := strings.Join(holding[:min(len(holding), maxNamedPods)], ", ")
	if len(holding) > maxNamedPods {
		named += fmt.Sprintf(" and %d more", len(holding)-maxNamedPods)
	}
	return fmt.Errorf("node %s: --memory-unit %s, but its devices were published in %s and kubelet lists %d pod(s) holding %s devices in %s: %s; "+
		"read in %s, their device IDs would name other amounts and kubelet's accounting of the cards would be wrong. "+
		"Drain the GPU pods from the node (kubectl drain %s, or delete them) and start the plugin again, or start it with --memory-unit %s",
		nodeName, unit, inv.Unit, len(holding), gpushare.ResourceGPUMem, inv.Unit, named, unit, nodeName, inv.Unit)
}
