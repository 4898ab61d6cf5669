// Package planner chooses, on a copy of one node, the lower-priority pods
// whose eviction lets a pending pod fit on its cards.
package planner
