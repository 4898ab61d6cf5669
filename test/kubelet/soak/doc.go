// Package soak is the chaos soak of issue 15: pods of mixed shapes arrive
// and depart over a local cluster (package cluster: a real control plane,
// the extender, simulated GPU nodes running kubelet's own device manager
// and our device plugin) while a seeded fault injector crashes, pauses and
// restarts its parts and flips cards' health, and a checker holds the
// invariants every few seconds and at the end.
//
// Every decision (the workload's pods and departures, the faults, their
// targets and durations) comes from the seed, so a seed replays a run's
// decisions; the timing around them is the machine's.
//
// The parts a fault acts on are small interfaces (Component, Pausable,
// Restarter, Cards) gathered in Targets: with the sidecar topology of high
// availability (cluster.Config.SchedulerReplicas) every kube-scheduler
// replica and every extender sidecar, leader or follower, is an entry of
// its kind, and a Replica names its role when it is killed. The checker
// compares the leading sidecar's inspect only. Up to Config.Overlap faults
// are in flight together, one per target.
package soak
