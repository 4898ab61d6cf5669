// Command pause is the real node's pod sandbox image (test/node): it holds
// the pod's namespaces and does nothing until SIGTERM or SIGINT, then
// exits 0. No registry is reachable from the test machines, so the node
// cannot pull registry.k8s.io/pause; this stands in for it.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
}
