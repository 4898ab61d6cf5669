// Package trace reads what the simulator replays, nodes and pods from openb
// CSV or Kubernetes YAML, and derives variants of it.
package trace
