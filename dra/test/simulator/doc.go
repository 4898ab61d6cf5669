// Package simulator checks the simulator's DRA replay (pkg/simulator,
// DRAPolicy) against DRA's own allocator as kube-scheduler 1.37 runs it
// (k8s.io/dynamic-resource-allocation/structured), on the slices the
// driver publishes (dra/pkg/devices).
package simulator
