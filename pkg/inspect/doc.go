// Package inspect is the kubectl plugin "kubectl inspect gpushare": it reads
// nodes and pods from the API (or the extender's inspect route), computes
// every card's allocation with the extender's own cache, and prints it as a
// summary table, a per-node detail, JSON or YAML.
package inspect
