package util

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreeAddr returns a loopback address whose port was free a moment ago,
// below the kernel's ephemeral range (ListenLoopback).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := ListenLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// ListenLoopback listens on a random loopback port below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), from portFloor up. The
// kernel never gives such a port to an outgoing connection or a ":0"
// listener, so one chosen here and closed stays free for the process a
// test starts on it next; a port the kernel chose could be handed to
// anything meanwhile, and make test runs several modules' tests (each with
// its API servers and clients) at once. When no such port can be had it
// lets the kernel choose.
func ListenLoopback() (net.Listener, error) {
	if top := ephemeralLow(); top-portFloor >= 1000 {
		for range 200 {
			port := portFloor + rand.IntN(top-portFloor) //nolint:gosec // G404: a test's port, not a secret
			if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				return ln, nil
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening on a loopback port: %w", err)
	}
	return ln, nil
}

// portFloor is the lowest port ListenLoopback chooses.
const portFloor = 10000

// ephemeralLow returns the first port of the kernel's ephemeral range
// (32768 when it cannot be read), read once per process.
var ephemeralLow = sync.OnceValue(readEphemeralLow)

func readEphemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 32768
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return lo
}
