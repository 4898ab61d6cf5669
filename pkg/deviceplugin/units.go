package deviceplugin

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpushare/gpushare/pkg/gpu"
	"github.com/gpushare/gpushare/pkg/gpushare"
)

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

// ListAndWatchBytes returns the size in bytes of the largest ListAndWatch
// response for these cards in unit: one device per unit, every one
// "Unhealthy" (longer than "Healthy"). Example: one 16 GiB card with a
// 40-byte UUID in GiB is 16 devices of ID "GPU-…::0".."GPU-…::15", about
// 16 × 60 bytes; the same card in MiB is 16384 devices, about 1 MiB.
func ListAndWatchBytes(devs []gpu.Device, unit string) int64 {
	var total int64
	for _, d := range devs {
		total += unitsBytes(Units(d.MemoryMiB, unit), int64(len(d.UUID)+len(idSeparator)))
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
