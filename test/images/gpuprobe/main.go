// Command gpuprobe is the GPU pods' image in the real-node tests
// (test/node): it prints what the container runtime gave it, its user,
// its environment and its mounts, in the format of package probe, then
// sleeps until SIGTERM or SIGINT and exits 0. The tests read it from the
// container's log: the view from inside the container, not the API's.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpushare/gpushare/test/node/probe"
)

func main() {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuprobe: reading the mounts:", err)
	}
	r := probe.Report{UID: os.Getuid(), GID: os.Getgid(), Env: os.Environ(), Mounts: probe.ParseMountinfo(string(mounts))}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if err := r.Write(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "gpuprobe:", err)
		os.Exit(1)
	}
	<-sig
}
