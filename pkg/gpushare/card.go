package gpushare

// Card is a GPU's identity as NVML reports it. The packages that speak of
// a card (discovery, isolation, the device plugin, the DRA driver and its
// ResourceSlice view) embed it and add what they know besides.
type Card struct {
	// Index is the card's NVML index (0-based, enumeration order).
	Index int
	// UUID is the card's NVML UUID, "GPU-<8-4-4-4-12 hex>"; it does not
	// change when the enumeration order does.
	UUID string
	// Model is the product name, e.g. "Tesla T4".
	Model string
	// MemoryMiB is the card's total memory in MiB.
	MemoryMiB int64
}
