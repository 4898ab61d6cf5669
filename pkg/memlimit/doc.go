// Package memlimit sets the Go runtime's soft memory limit (GOMEMLIMIT)
// from the memory limit of the cgroup the process runs in, so that the
// garbage collector works harder as the heap nears a container's limit
// instead of the kernel killing the process when it crosses it.
package memlimit
