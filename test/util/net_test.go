package util

import (
	"net"
	"strconv"
	"testing"
)

// TestListenLoopbackAvoidsTheEphemeralRange: the ports handed out lie
// below the kernel's ephemeral range, from portFloor, on the loopback.
func TestListenLoopbackAvoidsTheEphemeralRange(t *testing.T) {
	top := ephemeralLow()
	if top-portFloor < 1000 {
		t.Skipf("ephemeral range starts at %d: ListenLoopback lets the kernel choose", top)
	}
	for range 20 {
		host, port, err := net.SplitHostPort(FreeAddr(t))
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(port)
		if host != "127.0.0.1" || p < portFloor || p >= top {
			t.Fatalf("FreeAddr gave %s:%s; want 127.0.0.1 and a port in [%d, %d)", host, port, portFloor, top)
		}
	}
}
