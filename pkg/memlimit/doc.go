// Package memlimit sets the Go runtime's soft memory limit (GOMEMLIMIT)
// from the memory limit of the process's cgroup. The garbage collector then
// works harder as the heap nears a container's limit, rather than the
// kernel killing the process when it crosses it.
package memlimit
