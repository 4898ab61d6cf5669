package allocator

import (
	"testing"
	"unsafe"
)

// TestCardSize keeps Card to what a fit reads: the extender fits a pod on
// every node of a filter call, and at 15,000 nodes its time goes to
// loading the nodes' cards from memory (docs/benchmarks.md). A field read
// only under constraints or to report belongs in CardInfo.
func TestCardSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the budget is for 64-bit machines")
	}
	const maxBytes = 40
	if got := unsafe.Sizeof(Card{}); got > maxBytes {
		t.Errorf("allocator.Card takes %d bytes, more than %d: move what a fit does not read into CardInfo", got, maxBytes)
	}
}

// TestCardInfoNil: a card without Info (counted from capacity alone) has
// no UUID, model or isolation, and reading them is safe.
func TestCardInfoNil(t *testing.T) {
	c := Card{Index: 1, Total: 16, Healthy: true}
	if c.UUID() != "" || c.Model() != "" || c.Isolation() != "" {
		t.Errorf("card without Info: UUID %q, model %q, isolation %q; want all empty", c.UUID(), c.Model(), c.Isolation())
	}
}
