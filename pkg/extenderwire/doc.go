// Package extenderwire reads the bodies of kube-scheduler's extender
// requests: capped, pooled, one JSON value each, and ExtenderArgs by a
// scanner of its own that interns the node names.
package extenderwire
