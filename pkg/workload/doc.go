// Package workload learns, from the pods placed, the cluster's typical
// GPU requests, the CPU they ask per unit and the GPU models they are
// restricted to: what the default policy weighs pending pods by.
package workload
