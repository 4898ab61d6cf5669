// Package preemption evicts, for a pending GPU pod of higher priority, the
// lower-priority pods of one card: it plans and reserves in the allocation
// cache and writes the nomination and the evictions to the API.
package preemption
