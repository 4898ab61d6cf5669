// Package preemption evicts the lower-priority pods of one card for a
// pending GPU pod of higher priority: it plans and reserves in the
// allocation cache and writes the nomination and the evictions to the API.
package preemption
