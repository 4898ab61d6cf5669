// Package extenders gives the integration tests and the benchmarks
// (test/bench) the extenders they put behind kube-scheduler: the real
// binary, built as its image builds it, and a no-op one.
package extenders
