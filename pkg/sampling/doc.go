// Package sampling models how many nodes kube-scheduler looks for before it
// stops filtering and hands them to an extender (percentageOfNodesToScore).
package sampling
