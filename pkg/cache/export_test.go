package cache

// Used, HostUsed, CardsOf and CPUPerUnit show the black-box tests
// (package cache_test, fed by pkg/feed) what the cache holds: each card's
// Used on a node, the CPU and memory requested on it, its cards as Inspect
// shows them, the workload's CPU per unit.
var (
	Used     = used
	HostUsed = hostUsed
	CardsOf  = cardsOf
)

func CPUPerUnit(c *Cache) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.workload.CPUPerUnit()
}
