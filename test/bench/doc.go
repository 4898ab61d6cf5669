// Package bench measures the extender against a real control plane (see
// test/integration/framework): its resident memory, its filter's latency
// over HTTP and kube-scheduler's throughput with it. `make bench` runs the
// measurements (GPUSHARE_BENCH=1); without it they skip.
package bench
